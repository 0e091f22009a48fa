// What a disk layer logs: what it recovers from on its own. Errors it throws are its chain's to
// log. Every record names the layer's directory (see `LayerEnvironment`).
extension DiskLayer {
  /// `.warning`: a damaged entry file was found, counted and (if `removed`) deleted; a miss.
  func logDamagedFile(_ name: String, key: String?, reason: String, removed: Bool) {
    layerEnvironment.log(
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
