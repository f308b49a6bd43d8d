"""The `rsc` console tools, one module per command: each adds its parser and runs it.

`rsc.commands.coordinator`, `rsc.commands.produce`, `rsc.commands.consume` (its `--peek`
in `rsc.commands.peek`), `rsc.commands.admin`, `rsc.commands.demo`; what produce and
consume share in `rsc.commands.member_tool`. The dispatcher (`rsc.cli`) imports a runner
only when its command is chosen.
"""
