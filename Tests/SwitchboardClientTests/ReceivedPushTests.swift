import Foundation
import SwitchboardClient
import Testing

/// `makeReceivedPushStream()`: each push with whether its frame came compressed, against a live gateway.
@Suite("Received pushes and their COMPRESSED flag")
struct ReceivedPushTests {
    /// The `set` storage events of channel `big` that `client` receives while `writer` writes `values` there.
    static func setEvents(
        reading client: SwitchboardClient, writer: SwitchboardClient, values: [String]
    ) async throws -> [ReceivedPush] {
        let stream = client.makeReceivedPushStream()
        try await client.subscribeChannel(channel: "big", options: ChannelSubscriptionOptions(withMetadata: true, withPresence: false))
        for value in values {
            _ = try await writer.setChannelMetadata(channel: "big", items: [MetadataItem(key: "doc", value: value)])
        }
        var events: [ReceivedPush] = []
        for await received in stream {
            if case .storageEvent(let event) = received.push, event.eventType == .set { events.append(received) }
            if events.count == values.count { break }
        }
        return events
    }

    @Test("a push over the compression threshold arrives compressed when zlib was negotiated, a short one plain; without zlib none is")
    func compressedFlagFollowsTheFrame() async throws {
        let gateway = try ConformanceGateway(withTokens: false)
        try await gateway.start()
        let endpoint = ClientConfiguration.Endpoint.tcp(host: "127.0.0.1", port: gateway.port)
        let writer = SwitchboardClient(configuration: ClientConfiguration(endpoint: endpoint, userID: "tony"))
        let zlib = SwitchboardClient(configuration: ClientConfiguration(endpoint: endpoint, userID: "ana"))
        var plainConfiguration = ClientConfiguration(endpoint: endpoint, userID: "bob")
        plainConfiguration.features = []
        let plain = SwitchboardClient(configuration: plainConfiguration)
        do {
            try await writer.connect()
            #expect(try await zlib.connect().features == ["zlib"])
            #expect(try await plain.connect().features == [])
            let long = String(repeating: "switchboard ", count: 1000)
            let withZlib = try await Self.setEvents(reading: zlib, writer: writer, values: ["short", long])
            #expect(withZlib.map(\.compressed) == [false, true])
            guard case .storageEvent(let event) = withZlib.last?.push else { throw GatewayFailure(description: "no event") }
            #expect(event.items.first?.value == long)
            let withoutZlib = try await Self.setEvents(reading: plain, writer: writer, values: [long + "!"])
            #expect(withoutZlib.map(\.compressed) == [false])
        } catch {
            for client in [writer, zlib, plain] { await client.close() }
            await gateway.remove()
            throw error
        }
        for client in [writer, zlib, plain] { await client.close() }
        await gateway.remove()
    }
}
