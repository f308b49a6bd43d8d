"""What the coordinator and the members both run; imports only rsc.protocol and third-party libraries."""
