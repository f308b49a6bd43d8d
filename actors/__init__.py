"""The coordinator: pure group state machine and assignor, with thin trio shells around them."""
