import Foundation
import Synchronization

// Reads on the caller's thread: a hit whose file is in memory costs no thread hand-off. What
// they change in the layer's state (the order of use, the files' times) is handed to its thread
// in batches.
extension DiskLayer {
  /// The entry for `encodedKey` in the file `name`, read on the caller's thread if the kernel
  /// can answer without waiting for the device (see ``DiskFileSystem/readCached(_:size:closeElsewhere:)``);
  /// `nil` when the layer's thread must read it: the file would come from the device, or it is
  /// damaged, holds another key, expired or is dead by tag (which only the layer's thread
  /// records).
  ///
  /// `.some(nil)` is a miss: the index holds no file of that name (no I/O then), or the kernel
  /// knows the file is absent.
  nonisolated func entryInPlace(named name: SHA256.Digest, key encodedKey: String) -> CacheEntry<Value>?? {
    guard let size = knownNames.withLock({ $0[name] }) else {
      readCounts.inPlace.add(1, ordering: .relaxed)
      readCounts.misses.add(1, ordering: .relaxed)
      return .some(nil)
    }
    // A file larger than an entry may be (left by a configuration of larger entries, say) is
    // the layer's thread's to read, and to refuse.
    guard size <= DiskEntryFormat.headerSize + Self.longestKey + maximumEntrySize else { return nil }
    let fileSystem = fileSystem
    let read = fileSystem.readCached(path(of: name), size: size) { unlinked in
      executor.execute { try? fileSystem.close(unlinked) }
    }
    switch read {
    case .unavailable:
      return nil
    case .missing:
      // Deleted behind the layer's back: a miss, and the index forgets the file (with others).
      if readsInPlace.withLock({ $0.noteVanished(name) }) { scheduleApplyingReadsInPlace() }
      readCounts.inPlace.add(1, ordering: .relaxed)
      readCounts.misses.add(1, ordering: .relaxed)
      return .some(nil)
    case .file(let buffer, let count, let modificationTime):
      let file = UnsafeRawBufferPointer(rebasing: buffer[..<count])
      guard let header = try? DiskEntryFormat.verify(file),
        let metadata = try? DiskEntryFormat.metadata(of: file, header: header),
        header.keyLength == encodedKey.utf8.count
      else {
        buffer.deallocate()
        return nil
      }
      let keyBytes = UnsafeRawBufferPointer(
        rebasing: file[DiskEntryFormat.headerSize..<(DiskEntryFormat.headerSize + header.keyLength)])
      var wanted = encodedKey
      let now = followedClock.now.nanosecondsSince1970
      guard wanted.withUTF8({ keyBytes.elementsEqual(UnsafeRawBufferPointer($0)) }),
        header.expiresAt > now, !tagInvalidations.kills(metadata)
      else {
        buffer.deallocate()
        return nil
      }
      // The value's bytes stay where they were read: the `Data` takes over the allocation.
      let payloadOffset = header.payloadOffset
      let payload = Data(
        bytesNoCopy: buffer.baseAddress! + payloadOffset, count: header.payloadLength,
        deallocator: .custom { pointer, _ in (pointer - payloadOffset).deallocate() })
      guard let value = try? valueCoder.decode(payload) else { return nil }
      noteReadInPlace(name, touch: SystemTime.realtimeNanoseconds() &- modificationTime >= Self.touchInterval)
      readCounts.inPlace.add(1, ordering: .relaxed)
      readCounts.hits.add(1, ordering: .relaxed)
      let expiresAt = header.expiresAt == DiskEntryFormat.neverExpires ? nil : header.expiresAt
      return .some(
        CacheEntry(value, expiresAt: expiresAt.map(CacheInstant.init(nanosecondsSince1970:)), metadata: metadata))
    }
  }

  /// Records a hit read on the caller's thread, for the layer's thread to apply with others.
  private nonisolated func noteReadInPlace(_ name: SHA256.Digest, touch: Bool) {
    if readsInPlace.withLock({ reads in reads.note(name, touch: touch) }) { scheduleApplyingReadsInPlace() }
  }

  private nonisolated func scheduleApplyingReadsInPlace() {
    executor.execute { [self] in assumeIsolated { $0.applyReadsInPlace() } }
  }

  /// Applies the reads answered on callers' threads since the last time: each marks its entry
  /// most recently used, and those whose file's time is a minute old set it to now (so that the
  /// order survives a restart). Called in batches, before eviction chooses, and when the keys
  /// are listed by recency.
  func applyReadsInPlace() {
    let reads = readsInPlace.withLock { reads in
      defer { reads = ReadsInPlace() }
      return reads
    }
    for name in reads.used {
      if let slot = index.slot(of: name) { index.markUsed(slot) }
    }
    for name in reads.vanished {
      // Gone from the directory (removed by hand, say): no longer counted against the limits.
      guard let slot = index.slot(of: name) else { continue }
      do throws(DiskSystemError) {
        try fileSystem.close(try fileSystem.openForReading(path(of: name)))
      } catch  where error.code == ENOENT {
        index.remove(slot)
      } catch {}
    }
    guard !reads.touched.isEmpty else { return }
    let wallNow = SystemTime.realtimeNanoseconds()
    for name in reads.touched {
      guard let slot = index.slot(of: name), wallNow &- index[slot].touchedAt >= Self.touchInterval else { continue }
      // Best effort, as on the layer's thread: on a read-only file system the order is kept in
      // memory only.
      _ = fileSystem.touchFile(path(of: name))
      index.setTouched(slot, at: wallNow)
    }
  }
}

/// The hits read on callers' threads that the layer's thread has not applied yet.
struct ReadsInPlace: Sendable {
  /// The entries read, oldest first; at most ``limit`` (more are dropped: the order of use is
  /// then approximate, as under any sampled policy, never wrong about what is stored).
  var used: [SHA256.Digest] = []
  /// The entries whose file's time is to be set to now.
  var touched: [SHA256.Digest] = []
  /// The entries whose file was missing: the index forgets them if they still are.
  var vanished: [SHA256.Digest] = []
  var isApplyScheduled = false

  /// Reads gathered before the layer's thread is asked to apply them.
  static let batch = 32
  static let limit = 4_096

  /// Records a file found missing (once); returns whether the caller must schedule
  /// ``DiskLayer/applyReadsInPlace()``.
  mutating func noteVanished(_ name: SHA256.Digest) -> Bool {
    if vanished.count < Self.batch, !vanished.contains(name) { vanished.append(name) }
    guard !isApplyScheduled else { return false }
    isApplyScheduled = true
    return true
  }

  /// Records a read; returns whether the caller must schedule ``DiskLayer/applyReadsInPlace()``.
  mutating func note(_ name: SHA256.Digest, touch: Bool) -> Bool {
    if used.count < Self.limit { used.append(name) }
    if touch, touched.count < Self.limit { touched.append(name) }
    guard !isApplyScheduled, used.count + touched.count >= Self.batch else { return false }
    isApplyScheduled = true
    return true
  }
}

/// A disk layer's read counters, updated from any thread.
final class DiskReadCounts: Sendable {
  let hits = Atomic<Int>(0)
  let misses = Atomic<Int>(0)
  let inPlace = Atomic<Int>(0)
}
