// What a program needs beside `import AskClient` to build a center: the model and wire types (`AskProtocol`, which
// re-exports `AskModel`), key files and principals (`AskKeys`), ``ClientContext`` and `AskLogger` (`AskLogging`).
// No ZeroMQ type is part of this API: the sockets live inside, made in a ``ClientContext``.
@_exported import AskKeys
@_exported import AskLogging
@_exported import AskProtocol
