import SwitchboardDump
import Testing

@Suite struct TapAddressTests {
    @Test("host:port, [v6]:port, unix:PATH and bare paths parse to the right transport")
    func parsesAddresses() throws {
        #expect(try TapAddress(parsing: "127.0.0.1:7401") == .tcp(host: "127.0.0.1", port: 7401))
        #expect(try TapAddress(parsing: "localhost:7400") == .tcp(host: "localhost", port: 7400))
        #expect(try TapAddress(parsing: "[::1]:7400") == .tcp(host: "::1", port: 7400))
        #expect(try TapAddress(parsing: "unix:/tmp/tap.sock") == .unix(path: "/tmp/tap.sock"))
        #expect(try TapAddress(parsing: "unix:./switchboard.sock") == .unix(path: "./switchboard.sock"))
        #expect(try TapAddress(parsing: "./switchboard.sock") == .unix(path: "./switchboard.sock"))
    }

    @Test("addresses print the way they are written")
    func printsAddresses() throws {
        for text in ["127.0.0.1:7401", "[::1]:7400", "unix:/tmp/tap.sock"] {
            #expect(try TapAddress(parsing: text).description == text)
        }
    }

    @Test("a missing or bad port, an empty host or path, and an over-long socket path are refused",
          arguments: ["127.0.0.1", "127.0.0.1:", "127.0.0.1:http", "127.0.0.1:70000", ":7400", "unix:",
                      "unix:/" + String(repeating: "a", count: 120)])
    func refusesBadAddresses(text: String) {
        #expect(throws: TapAddressError.self) { _ = try TapAddress(parsing: text) }
    }
}
