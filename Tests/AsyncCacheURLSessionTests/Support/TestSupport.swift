import AsyncCacheURLSession
import Foundation
import HTTPTestSupport

#if canImport(FoundationNetworking)
  import FoundationNetworking
#endif

/// A session of its own for one test: no shared cookies, cache or connections.
func makeSession(timeout: TimeInterval = 30) -> URLSession {
  let configuration = URLSessionConfiguration.ephemeral
  configuration.timeoutIntervalForRequest = timeout
  configuration.requestCachePolicy = .reloadIgnoringLocalCacheData
  return URLSession(configuration: configuration)
}

extension URLSessionFetcher.Configuration {
  /// The defaults without the time limit, for every test that does not test it.
  ///
  /// The default limit is 30 s of wall time, and in a full `swift test` on two cores a test that
  /// holds a transfer open across a few of its own steps can take longer than that: each of its
  /// awaits waits behind the jobs of hundreds of other tests. CI saw a dropped connection and an
  /// invalidated session reported as `timeLimitExceeded` that way. The tests of the limit inject a
  /// `ManualClock`.
  static let untimed = Self(timeLimit: nil)
}

/// `count` bytes that are the same on every run and unlikely to hide an off-by-one (no repeats
/// at short periods).
func seededBytes(_ count: Int, seed: UInt64 = 0x5EED) -> Data {
  var state = seed
  var bytes = [UInt8](repeating: 0, count: count)
  for index in bytes.indices {
    state = state &* 6_364_136_223_846_793_005 &+ 1_442_695_040_888_963_407
    bytes[index] = UInt8(truncatingIfNeeded: state >> 33)
  }
  return Data(bytes)
}

/// A gzip stream (RFC 1952) that decodes to `count` zero bytes, built by hand (the tests link no
/// compression library): one DEFLATE block with the fixed Huffman codes, a literal zero, then
/// matches of 258 bytes at distance 1 (13 bits each, so about 1.3 MB for 200 MiB), then the rest
/// as literals. Its CRC-32 and length are right, so a client that decodes it all accepts it.
func gzippedZeros(_ count: Int) -> Data {
  precondition(count >= 1)
  var bits = BitWriter()
  bits.write(0b11, count: 3)  // BFINAL = 1, BTYPE = 01 (fixed Huffman codes)
  // Huffman codes go most significant bit first, so their bits are reversed here.
  let literalZero: UInt64 = 0b0000_1100  // literal 0: 8-bit code 0011_0000
  let match258: UInt64 = 0b1010_0011  // length 258: code 285, 8 bits 1100_0101; then distance 1: 5 zero bits
  bits.write(literalZero, count: 8)
  let (matches, literals) = (count - 1).quotientAndRemainder(dividingBy: 258)
  for _ in 0..<matches { bits.write(match258, count: 13) }
  for _ in 0..<literals { bits.write(literalZero, count: 8) }
  bits.write(0, count: 7)  // end of block: code 256, 7 zero bits
  var gzip = Data([0x1F, 0x8B, 8, 0, 0, 0, 0, 0, 0, 0xFF])  // deflate, no flags, no time, unknown OS
  gzip += bits.finished
  let crc = crc32OfZeros(count)
  let size = UInt32(truncatingIfNeeded: count)
  for value in [crc, size] { gzip += withUnsafeBytes(of: value.littleEndian) { Data($0) } }
  return gzip
}

/// Bits packed least significant first, as DEFLATE wants them.
private struct BitWriter {
  var bytes: [UInt8] = []
  private var buffer: UInt64 = 0
  private var count = 0

  mutating func write(_ value: UInt64, count bitCount: Int) {
    buffer |= value << UInt64(count)
    count += bitCount
    while count >= 8 {
      bytes.append(UInt8(truncatingIfNeeded: buffer))
      buffer >>= 8
      count -= 8
    }
  }

  /// The bytes, the last one padded with zero bits.
  var finished: [UInt8] { count > 0 ? bytes + [UInt8(truncatingIfNeeded: buffer)] : bytes }
}

/// The CRC-32 (IEEE, as gzip uses it) of `count` zero bytes, in O(log count): a zero byte maps the
/// CRC register through a linear function over GF(2), whose `count`-th power is found by squaring.
func crc32OfZeros(_ count: Int) -> UInt32 {
  var table = [UInt32](repeating: 0, count: 256)
  for index in 0..<256 {
    var value = UInt32(index)
    for _ in 0..<8 { value = value & 1 == 1 ? 0xEDB8_8320 ^ (value >> 1) : value >> 1 }
    table[index] = value
  }
  /// A linear map as the images of the 32 unit vectors.
  typealias Matrix = [UInt32]
  func apply(_ matrix: Matrix, _ vector: UInt32) -> UInt32 {
    (0..<32).reduce(0) { result, bit in vector >> bit & 1 == 1 ? result ^ matrix[bit] : result }
  }
  var power: Matrix = (0..<32).map { bit in
    let vector = UInt32(1) << bit
    return table[Int(vector & 0xFF)] ^ (vector >> 8)
  }
  var register: UInt32 = 0xFFFF_FFFF
  var remaining = count
  while remaining > 0 {
    if remaining & 1 == 1 { register = apply(power, register) }
    power = power.map { apply(power, $0) }
    remaining >>= 1
  }
  return register ^ 0xFFFF_FFFF
}

/// The value of `task`; cancelling the waiting task (a test's time limit, say) cancels `task`
/// too, so a test whose task never ends fails at its time limit instead of hanging the run.
func value<Success: Sendable>(of task: Task<Success, any Error>) async throws -> Success {
  try await withTaskCancellationHandler {
    try await task.value
  } onCancel: {
    task.cancel()
  }
}
