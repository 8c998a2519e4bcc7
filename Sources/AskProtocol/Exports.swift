// The wire is spoken in the model's types: `import AskProtocol` brings AskModel with it, and the byte-level message
// the codec parses and encodes (`Multipart`, from `WireBytes`, which links no libzmq).
@_exported import AskModel
@_exported import WireBytes
