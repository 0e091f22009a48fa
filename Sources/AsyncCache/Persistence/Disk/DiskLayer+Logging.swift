// What a disk layer logs: what it recovers from on its own. Errors it throws are its chain's to
// log. Every record names the layer's directory.
extension DiskLayer {
  /// Logs through the configuration's logger as `DiskLayer`, adding the directory to `metadata`.
  nonisolated func log(
    _ level: CacheLogLevel,
    _ message: @autoclosure () -> String,
    metadata: @autoclosure () -> [String: String] = [:],
    file: String = #fileID,
    function: String = #function,
    line: UInt = #line
  ) {
    followedLogger.value.log(
      level, message(), metadata: metadata().merging(["directory": directoryPath]) { mine, _ in mine },
      source: "DiskLayer", file: file, function: function, line: line)
  }

  /// `.warning`: a damaged entry file was found, counted and (if `removed`) deleted; a miss.
  func logDamagedFile(_ name: String, key: String?, reason: String, removed: Bool) {
    log(
      .warning,
      removed
        ? "a damaged entry file was deleted; a miss"
        : "a damaged entry file could not be deleted; it is no longer used",
      metadata: {
        var metadata = ["file": name, "reason": reason]
        if let key { metadata["key"] = CacheLogger.describe(key) }
        return metadata
      }())
  }
}
