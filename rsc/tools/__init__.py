"""What the `rsc produce` and `rsc consume` command lines run beside the library: a shell
layer over rsc.member that the library never imports (tests/test_layering.py holds this).

- `rsc.tools.input_lines`: `rsc produce`'s stdin lines, parsed and read into a bounded channel.
- `rsc.tools.output_lines`: `rsc consume`'s JSON lines on stdout, stopped cleanly by a closed pipe.
- `rsc.tools.tool_output`: the tools' stderr lines, warnings rate-limited, the second Ctrl-C.
- `rsc.tools.peek`: `rsc consume --peek` (XRANGE over the current routing's shards) and
  `--max-messages`' quota.
- `rsc.tools.probes`: the tools' metrics and health ports.

The parsers and runners of the commands themselves are rsc.commands.
"""
