import AsyncCache
import Foundation

/// What a prefetcher did, counted from its updates.
struct PrefetchActivity {
  var loaded = 0
  var skipped = 0
  var failed = 0
  var cancelled = 0
  /// How many times requests held prefetching back.
  var pauses = 0

  mutating func record(_ event: PrefetchEvent<Int>) {
    switch event {
    case .loaded: loaded += 1
    case .skipped: skipped += 1
    case .failed: failed += 1
    case .cancelled: cancelled += 1
    case .paused: pauses += 1
    case .moved, .started, .resumed, .dropped: break
    }
  }
}

/// Follows a prefetcher's updates: redraws a one-line progress bar on a terminal, and prints a
/// plain line at each quarter of the gallery otherwise, so that logs (CI, pipes) stay readable.
struct PrefetchMonitor {
  let photoCount: Int
  let isTerminal = isatty(STDOUT_FILENO) == 1

  /// Returns what the prefetcher did once `updates` finishes, when the prefetcher stops.
  func follow(_ updates: EventSequence<PrefetchUpdate<Int>>) async -> PrefetchActivity {
    var activity = PrefetchActivity()
    var quartersReported = 0
    for await update in updates {
      activity.record(update.event)
      if isTerminal {
        draw(update.progress)
      } else if case .moved(let index) = update.event, index * 4 / photoCount > quartersReported {
        quartersReported = index * 4 / photoCount
        print(
          "    at photo \(index + 1) of \(photoCount): \(activity.loaded) prefetched so far, the window "
            + "\(update.progress.completed)/\(update.progress.total) done")
      }
    }
    if isTerminal { write("\r\u{1B}[2K") }  // clears the bar, for the report that follows
    return activity
  }

  /// `  [██████████████░░░░░░] 4/5 window @ photo 42/300  paused`
  func draw(_ progress: PrefetchProgress) {
    let width = 20
    let filled = Int((progress.fractionCompleted * Double(width)).rounded())
    let bar = String(repeating: "█", count: filled) + String(repeating: "░", count: width - filled)
    let paused = progress.isPaused ? "  paused" : ""
    // `\r` returns to the start of the line, `ESC [K` clears what a longer line left.
    write(
      "\r  [\(bar)] \(progress.completed)/\(progress.total) window @ photo \(progress.currentIndex + 1)/"
        + "\(photoCount)\(paused)\u{1B}[K")
  }

  /// Writes without a newline: the terminal shows it now, not when the line ends.
  private func write(_ text: String) {
    print(text, terminator: "")
    fflush(nil)
  }
}
