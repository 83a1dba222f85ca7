import Foundation
@testable import SwitchboardHTTPAPI
import SwitchboardTestSupport
import SwitchboardWire
import Testing

/// The OpenAPI document and the routes: the served document is the repository's, every route the server serves is
/// in it and every path in it is served, and its references resolve.
@Suite("The HTTP API: the OpenAPI document and the routes")
struct HTTPAPIDocumentTests {
    /// The document's operations: path → method → operation.
    static func paths(_ document: JSONValue) throws -> [String: [String]] {
        guard case .object(let paths) = try #require(document["paths"]) else { return [:] }
        var out: [String: [String]] = [:]
        for (path, item) in paths {
            guard case .object(let methods) = item else { continue }
            out[path] = methods.map(\.key)
        }
        return out
    }

    @Test("/openapi.json is Protocol/openapi.json; its paths are exactly the routes served, each a POST (and a GET for an op that takes nothing)")
    func routesAndDocumentAgree() async throws {
        let repository = try Repository.text("Protocol/openapi.json")
        try await withAPIGateway { gateway in
            let served = try await LoopbackHTTP.request("GET", "/openapi.json", to: gateway.api)
            #expect(served.status == 200)
            #expect(served.headers["content-type"] == "application/json")
            #expect(served.body + "\n" == repository || served.body == repository)
            let document = try JSONValue.parse(served.body)
            #expect(document["openapi"] == .string("3.1.0"))
            let paths = try Self.paths(document)
            #expect(Set(paths.keys) == Set(APIOperations.all.map { "/v1/" + $0.name }).union(WebhookRoutes.paths))
            // The webhooks' routes answer unknownOperation on a gateway without webhooks (WebhookTests call them on one
            // with).
            for path in WebhookRoutes.paths {
                let answer = try await gateway.post(path, "{}")
                #expect(answer.status == 404 && answer.error?.name == "unknownOperation", "\(path): \(answer)")
            }
            let gettable = Set(APIOperations.gettable.map { "/v1/" + $0.name })
            #expect(gettable == ["/v1/info"])
            for (path, methods) in paths {
                #expect(methods == (gettable.contains(path) ? ["post", "get"] : ["post"]), "\(path)")
            }

            // Every wire operation: served (answered by its area, not unknownOperation) exactly when the document has
            // its path.
            for op in Opcode.allCases {
                let path = "/v1/" + op.name
                let answer = try await gateway.post(path, "{}")
                if paths[path] != nil {
                    #expect(answer.error?.name != "unknownOperation", "\(path) is in the document but not served: \(answer)")
                    #expect(answer.status != 405, "\(path): \(answer)")
                } else {
                    #expect(answer.status == 404 && answer.error?.name == "unknownOperation", "\(path) is served but not in the document: \(answer)")
                }
            }
            for path in ["/", "/v1", "/v1/", "/openapi.yaml", "/v2/getChannelMetadata", "/V1/getChannelMetadata"] {
                let answer = try await gateway.post(path, "{}")
                #expect(answer.status == 404, "\(path): \(answer)")
            }
        }
    }

    @Test("every $ref of the document names one of its components")
    func referencesResolve() throws {
        let document = try JSONValue.parse(try Repository.text("Protocol/openapi.json"))
        guard case .object(let schemas) = try #require(document["components"]?["schemas"]) else {
            Issue.record("no components.schemas")
            return
        }
        let names = Set(schemas.map(\.key))
        var references: [String] = []
        func collect(_ value: JSONValue) {
            switch value {
            case .object(let members):
                for (key, member) in members {
                    if key == "$ref", let target = member.stringValue { references.append(target) }
                    collect(member)
                }
            case .array(let elements): elements.forEach(collect)
            default: break
            }
        }
        collect(document)
        #expect(!references.isEmpty)
        for reference in references {
            #expect(reference.hasPrefix("#/components/schemas/") && names.contains(String(reference.dropFirst(21))), "\(reference)")
        }
    }
}
