import AskCLI
import Foundation

/// Progress on stderr: redrawn in place on a terminal, one line per update otherwise.
final class ProgressPrinter: Sendable {
    let isTerminal = isatty(2) == 1

    func show(_ label: String, _ progress: RelayLoadProgress) {
        let text = String(
            format: "%@ %.0fs %@: %d sent, %d completed, %d errors",
            label,
            progress.elapsedSeconds,
            progress.phase,
            progress.sent,
            progress.completed,
            progress.errors
        )
        if isTerminal {
            FileHandle.standardError.write(Data("\r\u{1B}[K\(text)".utf8))
        } else {
            printError(text)
        }
    }

    func step(_ step: SweepStep) {
        finish()
        printError(
            String(
                format: "step %.0f/s: achieved %.0f/s, p99 %.0f µs, %d errors: %@",
                step.targetRate,
                step.achievedRate,
                step.p99Us,
                step.errors,
                step.ok ? "ok" : step.reason
            )
        )
    }

    func finish() {
        if isTerminal { FileHandle.standardError.write(Data("\r\u{1B}[K".utf8)) }
    }
}
