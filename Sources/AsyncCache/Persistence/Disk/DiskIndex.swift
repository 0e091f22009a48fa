/// What a ``DiskLayer`` knows about its files, in memory: each file's key, size and expiry, in
/// least-recently-used order, and the totals its limits are checked against.
///
/// Rebuilt from the files' headers when the layer opens, so that a lookup of an absent key and
/// the choice of what to evict cost no I/O. Records live densely in an array (removal moves the
/// last record into the hole) and are linked into a recency list by position.
///
/// Not thread-safe: the layer's actor owns it.
struct DiskIndex {
  /// One file.
  struct Record {
    /// The file's name: the hash of its key.
    var name: SHA256.Digest
    /// The encoded key stored in the file.
    var key: String
    /// The file's length in bytes.
    var size: Int
    /// Expiry in nanoseconds since 1970; `Int64.max` for never.
    var expiresAt: Int64
    /// When the file's modification time was last set (by a write or a touch) or read, in
    /// wall-clock nanoseconds since 1970.
    var touchedAt: Int64
    /// The neighbour closer to the most recently used end, or `-1`.
    var newer = -1
    /// The neighbour closer to the least recently used end, or `-1`.
    var older = -1

    init(name: SHA256.Digest, key: String, size: Int, expiresAt: Int64, touchedAt: Int64) {
      self.name = name
      self.key = key
      self.size = size
      self.expiresAt = expiresAt
      self.touchedAt = touchedAt
    }
  }

  private(set) var records: [Record] = []
  private var slots: [SHA256.Digest: Int] = [:]
  /// The names of the records and their files' sizes, kept in step for readers on other threads
  /// (the layer's reads on callers' threads: a name not in it is a miss without I/O, and a
  /// file's size is known before it is opened), or `nil`.
  let publishedNames: Locked<[SHA256.Digest: Int]>?

  /// An empty index that keeps `publishedNames`, if given, in step with its records.
  init(publishing publishedNames: Locked<[SHA256.Digest: Int]>? = nil) {
    self.publishedNames = publishedNames
  }
  /// The most recently used record, or `-1`.
  private(set) var newest = -1
  /// The least recently used record, or `-1`.
  private(set) var oldest = -1
  /// The sum of the records' sizes.
  private(set) var totalBytes = 0

  /// The number of records.
  var count: Int { records.count }

  /// The position of the record for the file `name`, if any.
  func slot(of name: SHA256.Digest) -> Int? { slots[name] }

  /// The record at `slot`.
  subscript(slot: Int) -> Record { records[slot] }

  /// Makes the record at `slot` the most recently used.
  mutating func markUsed(_ slot: Int) {
    guard slot != newest else { return }
    unlink(slot)
    linkAsNewest(slot)
  }

  /// Notes that the file at `slot` had its modification time set at `instant`.
  mutating func setTouched(_ slot: Int, at instant: Int64) {
    records[slot].touchedAt = instant
  }

  /// Adds a record as the most recently used, replacing any record of the same name.
  mutating func insert(_ record: Record) {
    // Replaced, the name stays published throughout: a reader on another thread never sees a
    // file that is being rewritten as absent.
    if let slot = slots[record.name] { remove(slot, unpublishing: false) }
    let slot = records.count
    var record = record
    record.newer = -1
    record.older = -1
    records.append(record)
    slots[record.name] = slot
    publishedNames?.withLock { $0[record.name] = record.size }
    totalBytes += record.size
    linkAsNewest(slot)
  }

  /// Removes the record at `slot` and returns it.
  @discardableResult
  mutating func remove(_ slot: Int) -> Record {
    remove(slot, unpublishing: true)
  }

  @discardableResult
  private mutating func remove(_ slot: Int, unpublishing: Bool) -> Record {
    unlink(slot)
    let removed = records[slot]
    totalBytes -= removed.size
    slots[removed.name] = nil
    if unpublishing { publishedNames?.withLock { $0[removed.name] = nil } }
    let last = records.count - 1
    if slot != last {
      // Move the last record into the hole and repoint its neighbours at its new position.
      let moved = records[last]
      records[slot] = moved
      slots[moved.name] = slot
      if moved.newer >= 0 { records[moved.newer].older = slot } else { newest = slot }
      if moved.older >= 0 { records[moved.older].newer = slot } else { oldest = slot }
    }
    records.removeLast()
    return removed
  }

  /// Forgets every record.
  mutating func removeAll() {
    records.removeAll()
    slots.removeAll()
    publishedNames?.withLock { $0.removeAll() }
    newest = -1
    oldest = -1
    totalBytes = 0
  }

  /// The positions from the most to the least recently used.
  var slotsByRecency: [Int] {
    var order: [Int] = []
    order.reserveCapacity(records.count)
    var slot = newest
    while slot >= 0 {
      order.append(slot)
      slot = records[slot].older
    }
    return order
  }

  private mutating func unlink(_ slot: Int) {
    let (newer, older) = (records[slot].newer, records[slot].older)
    if newer >= 0 { records[newer].older = older } else { newest = older }
    if older >= 0 { records[older].newer = newer } else { oldest = newer }
    records[slot].newer = -1
    records[slot].older = -1
  }

  private mutating func linkAsNewest(_ slot: Int) {
    records[slot].older = newest
    records[slot].newer = -1
    if newest >= 0 { records[newest].newer = slot }
    newest = slot
    if oldest < 0 { oldest = slot }
  }

  /// Structural violations (empty when sound): for tests.
  func invariantViolations() -> [String] {
    var violations: [String] = []
    let order = slotsByRecency
    if order.count != records.count { violations.append("recency list has \(order.count) of \(records.count)") }
    if Set(order).count != order.count { violations.append("recency list repeats a record") }
    if slots.count != records.count { violations.append("\(slots.count) names for \(records.count) records") }
    for (slot, record) in records.enumerated() where slots[record.name] != slot {
      violations.append("record \(slot) is not indexed under its name")
    }
    if records.reduce(0, { $0 + $1.size }) != totalBytes { violations.append("totalBytes is off") }
    if let last = order.last, last != oldest { violations.append("oldest is not the list's end") }
    if let publishedNames,
      publishedNames.withLock({ $0 }) != Dictionary(uniqueKeysWithValues: records.map { ($0.name, $0.size) })
    {
      violations.append("the published names are not the records'")
    }
    return violations
  }
}
