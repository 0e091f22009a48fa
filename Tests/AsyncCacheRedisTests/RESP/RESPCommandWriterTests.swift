import Testing

@testable import AsyncCacheRedis

@Suite("RESPCommandWriter")
struct RESPCommandWriterTests {
  @Test func theWriterWritesWhatCommandsEncode() {
    var writer = RESPCommandWriter()
    writer.beginCommand(argumentCount: 3)
    writer.argument("MGET")
    writer.argument(Array("ns:".utf8), "café")
    writer.argument(Array("ns:".utf8), "")
    writer.beginCommand(argumentCount: 1)
    writer.argument(Array("PING".utf8))
    let expected =
      RESPCommand([Array("MGET".utf8), Array("ns:café".utf8), Array("ns:".utf8)]).encoded + RESPCommand("PING").encoded
    #expect(writer.bytes == expected)
    #expect(writer.commandCount == 2)
    // Lengths count bytes, not characters.
    #expect(String(decoding: writer.bytes, as: UTF8.self).contains("$8\r\nns:café\r\n"))
  }
}
