import Testing

@testable import AsyncCache

/// The count-min sketch behind W-TinyLFU. Hashes are passed as plain integers, so every
/// expectation is exact and replays (a key's `hashValue` changes from process to process).
@Suite struct FrequencySketchTests {
  @Test(
    "the table has two words per entry, rounded up to a power of two, at least one block; aging comes after 15× the size"
  )
  func sizing() {
    #expect(FrequencySketch.wordsPerEntry == 2 && FrequencySketch.sampleFactor == 15)
    #expect(FrequencySketch(maximumSize: 0).table.count == 8)
    #expect(FrequencySketch(maximumSize: 1).table.count == 8)
    #expect(FrequencySketch(maximumSize: 9).table.count == 32)
    #expect(FrequencySketch(maximumSize: 100).table.count == 256)
    #expect(FrequencySketch(maximumSize: 128).table.count == 256)
    #expect(FrequencySketch(maximumSize: 100).sampleSize == 1_500)
    #expect(FrequencySketch.tableLength(forMaximumSize: .max) == 2 * FrequencySketch.maximumCapacity)
  }

  @Test(
    "the adaptive policy's table has two words per entry up to 8,192 words, then one: a 1M-entry layer's sketch costs 8 B an entry"
  )
  func compactSizing() {
    #expect(FrequencySketch(maximumSize: 100, compact: true).table.count == 256)
    #expect(FrequencySketch(maximumSize: 3_125, compact: true).table.count == 8_192)
    #expect(FrequencySketch(maximumSize: 4_096, compact: true).table.count == 8_192)
    #expect(FrequencySketch(maximumSize: 6_000, compact: true).table.count == 8_192)
    #expect(FrequencySketch(maximumSize: 31_250, compact: true).table.count == 32_768)
    #expect(FrequencySketch(maximumSize: 31_250).table.count == 65_536)
    #expect(FrequencySketch.compactTableLength(forMaximumSize: .max) == FrequencySketch.maximumCapacity)
    let copy = FrequencySketch(maximumSize: 31_250, compact: true).copy()
    #expect(copy.table.count == 32_768, "a copy keeps the compact table")
  }

  @Test("a small refereed layer's dense table has 32 words per entry up to 32 KiB; aging keeps the cache's period")
  func denseSizing() throws {
    #expect(FrequencySketch(maximumSize: 1, compact: true, dense: true).table.count == 32)
    #expect(FrequencySketch(maximumSize: 100, compact: true, dense: true).table.count == 4_096)
    #expect(FrequencySketch(maximumSize: 100, compact: true, dense: true).sampleSize == 1_500)
    #expect(FrequencySketch(maximumSize: 400, compact: true, dense: true).table.count == 4_096)
    // From 4,096 words on, the compact table is as large already.
    #expect(FrequencySketch(maximumSize: 3_000, compact: true, dense: true).table.count == 8_192)
    #expect(FrequencySketch(maximumSize: 4_096, compact: true, dense: true).table.count == 8_192)
    let copy = FrequencySketch(maximumSize: 100, compact: true, dense: true).copy()
    #expect(copy.table.count == 4_096, "a copy keeps the dense table")
    // A refereed layer's segment gets it (its first sketch is sized for its whole count limit);
    // a layer of the ghosts' regime does not.
    for (countLimit, segments, words) in [(100, 1, 4_096), (1_000, 1, 4_096), (5_000, 1, 8_192), (1_000, 4, 512)] {
      let layer = try MemoryLayer<Int, Int>(configuration: .init(countLimit: countLimit, segmentCount: segments))
      for key in 0..<countLimit { try layer.insert(key, for: key) }
      let length = layer.store.segments.withLock(0) { $0.admission.sketch.storage.count }
      #expect(length == words, "\(countLimit) entries in \(segments) segments")
    }
  }

  @Test("a key's counters saturate at 15, and saturated increments are not sampled", arguments: [2, 16, 1_000])
  func saturation(maximumSize: Int) {
    var sketch = FrequencySketch(maximumSize: maximumSize)
    #expect(sketch.frequency(42) == 0)
    for count in 1...9 {
      sketch.increment(42)
      #expect(sketch.frequency(42) == count)
    }
    for _ in 0..<100 { sketch.increment(42) }
    #expect(sketch.frequency(42) == 15)
    #expect(sketch.sampleCount == 15, "only the increments that raised a counter count towards aging")
  }

  @Test("until an aging, no key is ever under-counted, however crowded the table", arguments: [1, 7, 42])
  func neverUnderCounts(seed: UInt64) {
    var random = SeededGenerator(seed: seed)
    // 2 000 keys in 512 words (8 192 counters): many collisions, but < 5 120 increments.
    var sketch = FrequencySketch(maximumSize: 512)
    var truth: [Int: Int] = [:]
    var increments: [Int] = []
    for _ in 0..<2_000 {
      let hash = Int.random(in: .min ... .max, using: &random)
      let count = Int.random(in: 0...4, using: &random)
      truth[hash, default: 0] += count
      increments += Array(repeating: hash, count: count)
    }
    #expect(increments.count < sketch.sampleSize)
    for hash in increments.shuffled(using: &random) { sketch.increment(hash) }
    for (hash, count) in truth {
      #expect(sketch.frequency(hash) >= Swift.min(count, 15))
    }
  }

  @Test("with room to spare, nearly every estimate is exact")
  func lightLoadIsExact() {
    var sketch = FrequencySketch(maximumSize: 1_024)
    let hashes: [Int] = (0..<200).map { (index: Int) -> Int in index &* 0x1000_0001 }
    for (index, hash) in hashes.enumerated() {
      for _ in 0..<(index % 10) { sketch.increment(hash) }
    }
    let exact = hashes.enumerated().filter { sketch.frequency($0.element) == $0.offset % 10 }.count
    #expect(exact >= 190)
  }

  @Test(
    "the sampleSize-th (15 × maximumSize) increment halves every counter and the sample count", arguments: [1, 16, 100])
  func aging(maximumSize: Int) throws {
    var sketch = FrequencySketch(maximumSize: maximumSize)
    let sampleSize = FrequencySketch.sampleFactor * maximumSize
    // Distinct keys, one increment each: every increment raises a counter, so it is sampled.
    for hash in 0..<(sampleSize - 1) {
      sketch.increment(hash)
      try #require(sketch.sampleCount == hash + 1)
    }
    // What the table would be without aging, after the last increment.
    var unaged = sketch.copy()
    unaged.sampleSize = .max
    unaged.increment(sampleSize - 1)
    #expect(unaged.sampleCount == sampleSize)

    sketch.increment(sampleSize - 1)

    #expect(sketch.table == unaged.table.map { ($0 >> 1) & 0x7777_7777_7777_7777 })
    let odd = unaged.table.reduce(0) { $0 + ($1 & 0x1111_1111_1111_1111).nonzeroBitCount }
    #expect(sketch.sampleCount == (sampleSize - odd / 4) / 2)
    for hash in 0..<sampleSize {
      #expect(sketch.frequency(hash) == unaged.frequency(hash) / 2)
    }
  }

  @Test("a saturated key is 7 after an aging, which comes after sampleSize sampled increments")
  func saturatedKeyAges() {
    var sketch = FrequencySketch(maximumSize: 16)
    for _ in 0..<15 { sketch.increment(-1) }
    #expect(sketch.frequency(-1) == 15)
    var hash = 0
    while sketch.frequency(-1) == 15 {
      sketch.increment(hash)
      hash += 1
    }
    #expect(sketch.frequency(-1) == 7)
    #expect(hash == sketch.sampleSize - 15, "the saturated key's 15 and one each for the others")
  }
}
