import Testing

@testable import AsyncCache

@Suite("Durations in log lines and messages")
struct ReadableDurationTests {
  @Test(
    "the largest unit that keeps the number at 1 or more, three decimals at most",
    arguments: [
      (Duration.zero, "0s"),
      (.nanoseconds(3), "3ns"),
      (.nanoseconds(999), "999ns"),
      (.nanoseconds(12_500), "12.5µs"),
      (.microseconds(1), "1µs"),
      (.milliseconds(250), "250ms"),
      (.nanoseconds(1_234_567), "1.235ms"),
      (.seconds(1), "1s"),
      (.milliseconds(1_500), "1.5s"),
      (.seconds(2), "2s"),
      (.milliseconds(59_999), "59.999s"),
      (.seconds(60), "1m"),
      (.seconds(90), "1m 30s"),
      (.seconds(7_205), "2h 5s"),
      (.milliseconds(61_500), "1m 1.5s"),
      (.seconds(3 * 86_400 + 4 * 3_600), "3d 4h"),
      (.milliseconds(-250), "-250ms"),
      (.seconds(-90), "-1m 30s"),
    ])
  func readable(duration: Duration, expected: String) {
    #expect(duration.readable == expected)
  }

  @Test("the extremes print without trapping")
  func extremes() {
    #expect(Duration.seconds(Int64.max).readable == "106751991167300d 15h 30m 7s")
    #expect(Duration.seconds(Int64.min).readable == "-106751991167300d 15h 30m 8s")
    // A value that rounds up to 1,000 of its unit is shown in the next one.
    #expect(Duration.nanoseconds(999_999_999).readable == "1s")
    #expect(Duration.nanoseconds(999_999).readable == "999.999µs")
    #expect(Duration.nanoseconds(999_999_600).readable == "1s")
    #expect(Duration.nanoseconds(999_999_400).readable == "999.999ms")
    #expect(Duration.milliseconds(59_999) + .microseconds(600) == .nanoseconds(59_999_600_000))
    #expect((Duration.milliseconds(59_999) + .microseconds(600)).readable == "1m")
    #expect((Duration.seconds(119) + .microseconds(999_600)).readable == "2m")
    #expect(Duration.nanoseconds(1_999_500).readable == "2ms")
  }

  @Test("events and configuration errors print durations readably")
  func inMessages() {
    let event = CacheEvent<String>.loadFinished(key: "k", source: .origin, duration: .milliseconds(200))
    #expect(event.description == "loadFinished k from origin in 200ms")
    let error = #expect(throws: AsyncCacheError.self) {
      try LoadTimeouts(soft: .seconds(2), hard: .seconds(1)).validate(in: "LoadingCache")
    }
    #expect(error?.message.contains("soft timeout (2s) must be shorter than the hard timeout (1s)") == true)
  }
}
