import Dispatch
import SwitchboardServer
import SwitchboardWire

/// The token target: login token verification (``TokenAuthority/verify(_:now:)``: the JWT parser, the key and
/// algorithm checks, the claims reader). The input is used twice: as a whole token, and as the claims of a token
/// correctly signed with the target's secret, so the claims reader sees arbitrary JSON behind a valid signature.
/// Crashes and traps are findings; refusals are the verifier doing its job. A token whose claims verify must come
/// back the same through ``TokenAuthority/mint(_:notBefore:keyID:algorithm:)`` (checked; a difference traps).
enum TokenTarget {
    static let authority = TokenAuthority(
        secret: Array("the-fuzzer's-token-secret-of-64-bytes-for-HS256-HS384-and-HS512!".utf8),
        keys: ["h": .hmac(secret: Array("a-second-hmac-key-of-at-least-32-bytes".utf8))])
    /// The server time of every verification (2027-01-15).
    static let now: Int64 = 1_800_000_000

    static func run(_ bytes: UnsafeRawBufferPointer) {
        let text = String(decoding: bytes, as: UTF8.self)
        _ = Self.verify(text)
        // The same bytes as the claims of a token the target signed.
        guard case .success(let claims) = Self.verify(Self.authority.token(signingPayload: text)) else { return }
        let again = Self.verify(Self.authority.mint(claims))
        guard case .success(let remade) = again, remade == claims else {
            fatalError("claims \(claims) did not survive mint -> verify: \(again)")
        }
    }

    /// Verifies `token`, waiting for the async answer (libFuzzer calls the target synchronously).
    static func verify(_ token: String) -> Result<AccessToken, SwitchboardWireError> {
        let done = DispatchSemaphore(value: 0)
        nonisolated(unsafe) var result: Result<AccessToken, SwitchboardWireError>?
        Task {
            do throws(SwitchboardWireError) {
                result = .success(try await Self.authority.verify(token, now: Self.now))
            } catch {
                result = .failure(error)
            }
            done.signal()
        }
        done.wait()
        return result!
    }
}
