// What a program needs beside `import AskClient` to build a center: the model and wire types (`AskProtocol`, which
// re-exports `AskModel`), `ZMQContext` (`ZeroMQ`) and `AskLogger` (`AskLogging`).
@_exported import AskLogging
@_exported import AskProtocol
@_exported import ZeroMQ
