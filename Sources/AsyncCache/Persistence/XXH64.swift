/// XXH64, the 64-bit xxHash by Yann Collet: the checksum that guards persisted values.
///
/// Persistent layers store it beside every value and recompute it on read, because neither the
/// file system nor SQLite notices garbage inside a file or a blob. It is not a cryptographic
/// hash: it detects torn writes and flipped bits, not tampering. It runs at several gigabytes a
/// second, so checking a value costs little next to reading it.
package enum XXH64 {
  @usableFromInline static let prime1: UInt64 = 0x9E37_79B1_85EB_CA87
  @usableFromInline static let prime2: UInt64 = 0xC2B2_AE3D_27D4_EB4F
  @usableFromInline static let prime3: UInt64 = 0x1656_67B1_9E37_79F9
  @usableFromInline static let prime4: UInt64 = 0x85EB_CA77_C2B2_AE63
  @usableFromInline static let prime5: UInt64 = 0x27D4_EB2F_1656_67C5

  /// The XXH64 digest of `bytes`, with `seed` mixed in (chain digests by passing one as the
  /// seed of the next).
  package static func hash(_ bytes: UnsafeRawBufferPointer, seed: UInt64 = 0) -> UInt64 {
    let count = bytes.count
    var offset = 0
    var hash: UInt64
    if count >= 32 {
      var v1 = seed &+ prime1 &+ prime2
      var v2 = seed &+ prime2
      var v3 = seed
      var v4 = seed &- prime1
      let limit = count - 32
      while offset <= limit {
        v1 = round(v1, load64(bytes, offset))
        v2 = round(v2, load64(bytes, offset + 8))
        v3 = round(v3, load64(bytes, offset + 16))
        v4 = round(v4, load64(bytes, offset + 24))
        offset += 32
      }
      hash = rotate(v1, 1) &+ rotate(v2, 7) &+ rotate(v3, 12) &+ rotate(v4, 18)
      hash = merge(hash, v1)
      hash = merge(hash, v2)
      hash = merge(hash, v3)
      hash = merge(hash, v4)
    } else {
      hash = seed &+ prime5
    }
    hash &+= UInt64(truncatingIfNeeded: count)
    while offset + 8 <= count {
      hash ^= round(0, load64(bytes, offset))
      hash = rotate(hash, 27) &* prime1 &+ prime4
      offset += 8
    }
    if offset + 4 <= count {
      let word = UInt32(littleEndian: bytes.loadUnaligned(fromByteOffset: offset, as: UInt32.self))
      hash ^= UInt64(word) &* prime1
      hash = rotate(hash, 23) &* prime2 &+ prime3
      offset += 4
    }
    while offset < count {
      hash ^= UInt64(bytes[offset]) &* prime5
      hash = rotate(hash, 11) &* prime1
      offset += 1
    }
    hash ^= hash >> 33
    hash &*= prime2
    hash ^= hash >> 29
    hash &*= prime3
    hash ^= hash >> 32
    return hash
  }

  /// The XXH64 digest of a byte sequence that can expose contiguous storage.
  package static func hash(_ bytes: some Sequence<UInt8>, seed: UInt64 = 0) -> UInt64 {
    if let digest = bytes.withContiguousStorageIfAvailable({ hash(UnsafeRawBufferPointer($0), seed: seed) }) {
      return digest
    }
    return Array(bytes).withUnsafeBytes { hash($0, seed: seed) }
  }

  @inline(__always)
  static func load64(_ bytes: UnsafeRawBufferPointer, _ offset: Int) -> UInt64 {
    UInt64(littleEndian: bytes.loadUnaligned(fromByteOffset: offset, as: UInt64.self))
  }

  @inline(__always)
  static func rotate(_ value: UInt64, _ bits: UInt64) -> UInt64 {
    (value << bits) | (value >> (64 - bits))
  }

  @inline(__always)
  static func round(_ accumulator: UInt64, _ input: UInt64) -> UInt64 {
    rotate(accumulator &+ input &* prime2, 31) &* prime1
  }

  @inline(__always)
  static func merge(_ accumulator: UInt64, _ value: UInt64) -> UInt64 {
    (accumulator ^ round(0, value)) &* prime1 &+ prime4
  }
}
