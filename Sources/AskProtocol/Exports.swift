// The wire is spoken in the model's types: `import AskProtocol` brings AskModel with it.
@_exported import AskModel
