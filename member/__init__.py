"""The data plane: member runtime (a pure ledger driven by small shells), listener API, producer."""
