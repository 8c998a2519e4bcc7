// The duration grammar, the value bounds and OneShot live in AskBasics (Foundation only), where the process harness,
// the command-line parsing and the links use them without the model. They stay part of AskModel's public API: a
// program reading durations or waiting for a value imports AskModel alone, as before. Only these five are
// re-exported; AskBasics' `package` helpers (Duration conversions, dedicated threads) are for this package's targets,
// which import AskBasics themselves.
@_exported import enum AskBasics.ValueBounds
@_exported import class AskBasics.OneShot
@_exported import func AskBasics.durationFromSeconds
@_exported import func AskBasics.durationText
@_exported import func AskBasics.parseDuration
