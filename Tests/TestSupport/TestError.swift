/// An error a test double throws on purpose, named after what it stands for.
package struct TestError: Error, Hashable, CustomStringConvertible {
  package var name: String

  package init(_ name: String = "boom") { self.name = name }

  package var description: String { "TestError(\(name))" }
}
