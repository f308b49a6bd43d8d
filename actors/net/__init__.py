"""The coordinator's sockets: the accept loop and its fd budget (A1), one server-side websocket
on wsproto, its outbox and TLS as a buffer machine. Knows no prefix, no store: the server
(`rsc.actors.server`) runs them and decides what a frame means."""
