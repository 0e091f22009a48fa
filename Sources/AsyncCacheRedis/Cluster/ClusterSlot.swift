/// Redis Cluster's hash slots: which of the 16384 slots a key belongs to.
///
/// A key's slot is the CRC16 (XMODEM: polynomial 0x1021, initial value 0) of the key modulo
/// 16384, or of its *hash tag* when it has one: the bytes between the first `{` and the first
/// `}` after it, when there is at least one byte between them. Keys with the same hash tag are
/// in the same slot, on the same node.
enum ClusterSlot {
  /// The number of slots.
  static let count = 16384

  /// The slot of the key made of `prefix` then the UTF-8 of `key` (the layer's
  /// `<namespace>:<key>`), without joining them.
  static func of(prefix: [UInt8], key: String) -> UInt16 {
    var key = key
    return prefix.withUnsafeBufferPointer { prefix in
      key.withUTF8 { key in slot(prefix, key) }
    }
  }

  /// The slot of `key`.
  static func of(_ key: some Collection<UInt8>) -> UInt16 {
    let bytes = Array(key)
    return bytes.withUnsafeBufferPointer { slot($0, UnsafeBufferPointer(start: nil, count: 0)) }
  }

  /// The slot of the concatenation of `first` and `second`.
  private static func slot(_ first: UnsafeBufferPointer<UInt8>, _ second: UnsafeBufferPointer<UInt8>) -> UInt16 {
    let count = first.count + second.count
    func byte(_ index: Int) -> UInt8 { index < first.count ? first[index] : second[index - first.count] }
    // The hash tag: from after the first "{" to before the first "}" that follows it.
    var start = 0
    var end = count
    var index = 0
    while index < count && byte(index) != UInt8(ascii: "{") { index += 1 }
    if index < count {
      var close = index + 1
      while close < count && byte(close) != UInt8(ascii: "}") { close += 1 }
      if close < count && close > index + 1 {
        start = index + 1
        end = close
      }
    }
    var crc: UInt16 = 0
    for position in start..<end {
      crc = (crc << 8) ^ table[Int(UInt8(truncatingIfNeeded: crc >> 8) ^ byte(position))]
    }
    return crc & UInt16(Self.count - 1)
  }

  /// CRC16-XMODEM of every byte value.
  private static let table: [UInt16] = (0..<256).map { value in
    var crc = UInt16(value) << 8
    for _ in 0..<8 { crc = crc & 0x8000 != 0 ? (crc << 1) ^ 0x1021 : crc << 1 }
    return crc
  }
}
