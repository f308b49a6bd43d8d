"""The coordinator's side of `/v1/admin` requests no prefix actor owns: the audit log (C3), the
format version, a shard's messages and pending entries (C2), dead letters (P3). The server
(`rsc.actors.server`) hands them over; `rsc.admin` is the client that sends them."""
