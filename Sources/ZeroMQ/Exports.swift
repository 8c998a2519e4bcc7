// The byte-level values sockets send and receive (`Multipart`) and CURVE key pairs as text live in `WireBytes`, which
// needs no libzmq, so the wire codec can use them without linking it; `import ZeroMQ` brings them with it.
@_exported import WireBytes
