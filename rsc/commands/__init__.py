"""The `rsc` console tools, one module per command: each adds its parser and runs it.

`rsc.commands.coordinator`, `rsc.commands.admin`, `rsc.commands.demo`; `produce` and
`consume` are `rsc.member.cli`'s. The dispatcher (`rsc.cli`) imports a runner only
when its command is chosen.
"""
