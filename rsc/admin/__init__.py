"""`rsc admin`: the operator's side of the coordinator's `/v1/admin` endpoint.

- `rsc.admin.args`: pure: the command line, env defaults, durations and times, the request
  each command sends;
- `rsc.admin.client`: the admin websocket session, URL checks, one-line connect failures (D3);
- `rsc.admin.group_view`: pure: a group as describe, watch and the console show it;
- `rsc.admin.view_text`, `rsc.admin.describe`, `rsc.admin.watch_view`: pure: the pieces of
  every view, describe's view, watch's change lines;
- `rsc.admin.views`: pure: rich views of every other admin response;
- `rsc.admin.cli`: the runner (connect, send, print a view or `--json`);
- `rsc.admin.watch`: `watch`, server pushes with a polling fallback.
"""
