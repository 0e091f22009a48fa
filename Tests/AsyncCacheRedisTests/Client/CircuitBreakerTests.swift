import AsyncCache
import Testing

@testable import AsyncCacheRedis

@Suite("CircuitBreaker")
struct CircuitBreakerTests {
  let start = CacheInstant(secondsSince1970: 1_000)
  let policy = RedisCircuitBreakerPolicy(
    failureThreshold: 3, initialDelay: .milliseconds(100), maximumDelay: .milliseconds(350))

  @Test("opens after the threshold of failures in a row; a success in between resets the count")
  func threshold() {
    var breaker = CircuitBreaker(policy: policy)
    #expect(breaker.recordFailure(at: start, opensAtOnce: false, jitter: 1) == nil)
    #expect(breaker.recordFailure(at: start, opensAtOnce: false, jitter: 1) == nil)
    #expect(breaker.recordSuccess() == false)
    #expect(breaker.recordFailure(at: start, opensAtOnce: false, jitter: 1) == nil)
    #expect(breaker.recordFailure(at: start, opensAtOnce: false, jitter: 1) == nil)
    #expect(breaker.admit(at: start) == .pass)
    let until = breaker.recordFailure(at: start, opensAtOnce: false, jitter: 1)?.until
    #expect(until == start.advanced(by: .milliseconds(100)))
    #expect(breaker.admit(at: start.advanced(by: .milliseconds(99))) == .reject(retryAt: until))
  }

  @Test("a failed connection opens it at once")
  func opensAtOnce() {
    var breaker = CircuitBreaker(policy: policy)
    #expect(
      breaker.recordFailure(at: start, opensAtOnce: true, jitter: 1)
        == .init(until: start.advanced(by: .milliseconds(100)), isReopening: false))
    // Failures of operations admitted before it opened change nothing.
    #expect(breaker.recordFailure(at: start, opensAtOnce: true, jitter: 1) == nil)
    #expect(breaker.state == .open(until: start.advanced(by: .milliseconds(100))))
  }

  @Test("after the delay one probe goes; the others fail fast until it ends")
  func probe() {
    var breaker = CircuitBreaker(policy: policy)
    _ = breaker.recordFailure(at: start, opensAtOnce: true, jitter: 1)
    let later = start.advanced(by: .milliseconds(100))
    #expect(breaker.admit(at: later) == .probe)
    #expect(breaker.admit(at: later) == .reject(retryAt: nil))
    // A probe that ends without an answer (cancelled) hands the role to the next operation.
    breaker.abandonProbe()
    #expect(breaker.admit(at: later) == .probe)
    #expect(breaker.recordSuccess() == true)
    #expect(breaker.state == .closed)
    #expect(breaker.admit(at: later) == .pass)
  }

  @Test("each failed probe doubles the delay up to the maximum; a success starts over")
  func backoff() throws {
    var breaker = CircuitBreaker(policy: policy)
    var now = start
    var delays: [Duration] = []
    for _ in 0..<5 {
      let opened = breaker.recordFailure(at: now, opensAtOnce: true, jitter: 1)
      let until = try #require(opened).until
      delays.append(now.duration(to: until))
      now = until
      #expect(breaker.admit(at: now) == .probe)
    }
    #expect(
      delays == [.milliseconds(100), .milliseconds(200), .milliseconds(350), .milliseconds(350), .milliseconds(350)])
    _ = breaker.recordSuccess()
    let opened = breaker.recordFailure(at: now, opensAtOnce: true, jitter: 1)
    let until = try #require(opened).until
    #expect(now.duration(to: until) == .milliseconds(100))
  }

  @Test("jitter shortens the delay by up to half")
  func jitter() {
    #expect(policy.delay(afterOpenings: 1, jitter: 0.5) == .milliseconds(50))
    #expect(policy.delay(afterOpenings: 2, jitter: 0.75) == .milliseconds(150))
    #expect(policy.delay(afterOpenings: 40, jitter: 1) == .milliseconds(350))
    let huge = RedisCircuitBreakerPolicy(initialDelay: .seconds(1), maximumDelay: .seconds(86_400 * 365))
    #expect(huge.delay(afterOpenings: 10_000, jitter: 1) == .seconds(86_400 * 365))
  }

  @Test("a failed probe is a reopening; the first failure of an outage is not")
  func reopening() throws {
    var breaker = CircuitBreaker(policy: policy)
    let firstOpening = breaker.recordFailure(at: start, opensAtOnce: true, jitter: 1)
    let first = try #require(firstOpening)
    #expect(!first.isReopening)
    #expect(admit(&breaker, at: first.until) == .probe)
    let secondOpening = breaker.recordFailure(at: first.until, opensAtOnce: true, jitter: 1)
    let second = try #require(secondOpening)
    #expect(second.isReopening)
    #expect(admit(&breaker, at: second.until) == .probe)
    let closed = breaker.recordSuccess()
    #expect(closed)
    let nextOpening = breaker.recordFailure(at: second.until, opensAtOnce: true, jitter: 1)
    let next = try #require(nextOpening)
    #expect(!next.isReopening, "a success ended the outage")
  }

  @Test("the next delay counts from when the probe went: a probe that waited out a connect timeout adds nothing")
  func probeTimeIsNotAdded() throws {
    var breaker = CircuitBreaker(policy: policy)
    let firstOpening = breaker.recordFailure(at: start, opensAtOnce: true, jitter: 1)
    let first = try #require(firstOpening)
    #expect(admit(&breaker, at: first.until) == .probe)
    // The probe's connect took 50 ms to fail; the next delay (200 ms) counts from its start.
    let failedAt = first.until.advanced(by: .milliseconds(50))
    let secondOpening = breaker.recordFailure(at: failedAt, opensAtOnce: true, jitter: 1)
    let second = try #require(secondOpening)
    #expect(second.until == first.until.advanced(by: .milliseconds(200)))
    #expect(admit(&breaker, at: second.until) == .probe)
    // A probe slower than the delay (350 ms, the maximum): the next may go after the first
    // delay (100 ms), not back to back.
    let slowFailure = second.until.advanced(by: .seconds(2))
    let thirdOpening = breaker.recordFailure(at: slowFailure, opensAtOnce: true, jitter: 1)
    let third = try #require(thirdOpening)
    #expect(third.until == slowFailure.advanced(by: .milliseconds(100)))
    #expect(admit(&breaker, at: third.until) == .probe)
  }

  private func admit(_ breaker: inout CircuitBreaker, at now: CacheInstant) -> CircuitBreaker.Admission {
    breaker.admit(at: now)
  }
}
