/// One entry of a ``MemorySegment``: 24 bytes besides the key and the value.
///
/// Bit layouts here and in the segment are fixed-width (`UInt64`, `UInt32`, `Int64`), never
/// `Int`, which has 32 bits on watchOS devices (arm64_32): costs and their sums are `Int64`
/// everywhere, so a layout or a total never depends on the platform.
@usableFromInline
struct MemoryNode<Key, Value> {
  @usableFromInline var key: Key
  @usableFromInline var value: Value
  /// Expiry in nanoseconds since 1970; `Int64.max` for never.
  @usableFromInline var expiry: Int64
  /// The cost in the low 43 bits (``costMask``); in the next whether the segment's reuse sampler
  /// watches the node's key (``isWatched``), and in the one above whether the node was inserted
  /// unasked for and has not been hit since (``isUnasked``), so that a hit checks both with the
  /// bits it reads anyway; the node's ``aliveStamp`` in the 16 above (from
  /// ``stampShift``), so that a hit on an entry with tags checks them without a lookup in the
  /// segment's metadata table; the ``SegmentRegion`` in the two above (from ``regionShift``), so
  /// that W-TinyLFU costs no memory per entry over LRU; and in the top bit whether the segment
  /// keeps ``EntryMetadata`` for the node (``hasMetadata``), so that an entry without any costs
  /// nothing for it.
  @usableFromInline var costAndRegion: UInt64
  /// The neighbour closer to the most recently used end of its list, or ``MemorySegment/none``.
  @usableFromInline var newer: UInt32
  /// The neighbour closer to the least recently used end of its list, or ``MemorySegment/none``.
  @usableFromInline var older: UInt32

  /// The bits of ``costAndRegion`` that hold the cost: 2^43 - 1.
  @usableFromInline static var costMask: UInt64 { (1 << 43) - 1 }
  /// The bit of ``costAndRegion`` that says whether the node's key is watched.
  @usableFromInline static var watchBit: UInt64 { 1 << 43 }
  /// The bit of ``costAndRegion`` that says whether the node is ``isUnasked``.
  @usableFromInline static var unaskedBit: UInt64 { 1 << 44 }
  /// The bits a hit checks for the sampler: ``watchBit`` and ``unaskedBit``.
  @usableFromInline static var samplerBits: UInt64 { watchBit | unaskedBit }
  /// The lowest bit of ``costAndRegion`` that holds the ``aliveStamp``.
  @usableFromInline static var stampShift: UInt64 { 45 }
  /// The bits of ``costAndRegion`` that hold the ``aliveStamp``.
  @usableFromInline static var stampMask: UInt64 { 0xFFFF << stampShift }
  /// The lowest bit of ``costAndRegion`` that holds the region.
  @usableFromInline static var regionShift: UInt64 { 61 }
  /// The bit of ``costAndRegion`` that says whether the node has metadata.
  @usableFromInline static var metadataBit: UInt64 { 1 << 63 }

  /// The largest cost an entry may have: 2^43 - 1 (8.8 × 10^12: 8 TiB, were costs bytes), or
  /// `Int.max` where that is smaller (32-bit platforms).
  @usableFromInline static var maximumCost: Int { Int(clamping: costMask) }

  /// A node in the window; `cost` must be in `0...maximumCost`.
  @inlinable
  init(key: Key, value: Value, expiry: Int64, cost: Int64) {
    self.key = key
    self.value = value
    self.expiry = expiry
    self.costAndRegion = UInt64(truncatingIfNeeded: cost)
    self.newer = .max
    self.older = .max
  }

  /// The entry's cost, 0 to ``maximumCost``.
  @inlinable
  var cost: Int64 {
    @inline(__always) get { Int64(truncatingIfNeeded: costAndRegion & Self.costMask) }
    @inline(__always) set { costAndRegion = costAndRegion & ~Self.costMask | UInt64(truncatingIfNeeded: newValue) }
  }

  /// The list the node is in.
  @inlinable
  var region: SegmentRegion {
    @inline(__always) get {
      SegmentRegion(rawValue: UInt8(truncatingIfNeeded: costAndRegion >> Self.regionShift) & 3) ?? .window
    }
    @inline(__always) set {
      costAndRegion = costAndRegion & ~(3 << Self.regionShift) | UInt64(newValue.rawValue) << Self.regionShift
    }
  }

  /// The segment's ``MemorySegment/tagGeneration`` when the node's tags were last found alive
  /// (see ``MemorySegment/tagsAreKnownAlive(at:recorded:)``); 0 for never: a new node, a node
  /// whose metadata changed, or one the segment's sweep reached.
  @inlinable
  var aliveStamp: UInt16 {
    @inline(__always) get { UInt16(truncatingIfNeeded: costAndRegion >> Self.stampShift) }
    @inline(__always) set {
      costAndRegion = costAndRegion & ~Self.stampMask | UInt64(newValue) << Self.stampShift
    }
  }

  /// Whether the segment's ``ReuseSampler`` watches the node's key: its next lookup is timed.
  @inlinable
  var isWatched: Bool {
    @inline(__always) get { costAndRegion & Self.watchBit != 0 }
    @inline(__always) set {
      costAndRegion = newValue ? costAndRegion | Self.watchBit : costAndRegion & ~Self.watchBit
    }
  }

  /// Whether the node was inserted unasked for (not to fill a miss of its key the segment's
  /// ``ReuseSampler`` saw just before) and no lookup the sampler counts has hit it since: its key
  /// may never have been looked up, so its next hit is not counted as a repeated one (see
  /// ``ReuseSampler/unaskedHits``).
  @inlinable
  var isUnasked: Bool {
    @inline(__always) get { costAndRegion & Self.unaskedBit != 0 }
    @inline(__always) set {
      costAndRegion = newValue ? costAndRegion | Self.unaskedBit : costAndRegion & ~Self.unaskedBit
    }
  }

  /// Whether the sampler has work on a hit of the node: it is watched or unasked for.
  @inlinable
  var concernsSampler: Bool {
    @inline(__always) get { costAndRegion & Self.samplerBits != 0 }
  }

  /// Whether the segment's ``MemorySegment/metadata`` holds the node's ``EntryMetadata``.
  @inlinable
  var hasMetadata: Bool {
    @inline(__always) get { costAndRegion & Self.metadataBit != 0 }
    @inline(__always) set {
      costAndRegion = newValue ? costAndRegion | Self.metadataBit : costAndRegion & ~Self.metadataBit
    }
  }
}

extension MemoryNode: Sendable where Key: Sendable, Value: Sendable {}
