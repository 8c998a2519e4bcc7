/// Decides whether the loop spins (polls without sleeping) after a turn that read input, from whether recent spins
/// caught a message before they ran out.
///
/// A spin that catches the next message saves the loop a sleep and a wake-up; one that runs out burns its whole
/// length for nothing. Under load (the next message is microseconds away) nearly every spin catches one; at moderate
/// rates (messages a few hundred microseconds apart) nearly none does. The governor keeps a moving share of spins
/// that caught a message (each spin weighs 1/8) and spins only while that share is at least one half; below it,
/// every 16th eligible turn still spins, so a rise in load is noticed within a few turns.
struct SpinGovernor {
    /// The moving share of spins that caught a message, in 1/256ths (starts at "always").
    private(set) var hitShare = 256
    /// Eligible turns since the last probe while the share is low.
    private var skipped = 0

    static let threshold = 128
    static let probeEvery = 16

    /// Whether to spin after this turn.
    mutating func shouldSpin() -> Bool {
        if hitShare >= Self.threshold { return true }
        skipped += 1
        if skipped >= Self.probeEvery {
            skipped = 0
            return true
        }
        return false
    }

    /// Records how a spin ended: `caught` when a message arrived before it ran out.
    mutating func record(caught: Bool) {
        hitShare += ((caught ? 256 : 0) - hitShare) / 8
    }
}
