import NIOCore
import SwitchboardWire

/// A request as the pairing remembers it.
public struct PairedRequest: Sendable, Hashable {
    /// Number of the request frame in its stream.
    public var index: Int
    /// Offset of the request frame in its stream.
    public var offset: Int
    /// The request's op.
    public var op: UInt8
    /// The request id.
    public var requestID: UInt32

    /// Creates a request record.
    public init(index: Int, offset: Int, op: UInt8, requestID: UInt32) {
        self.index = index
        self.offset = offset
        self.op = op
        self.requestID = requestID
    }
}

/// What the pairing found out about a request or response frame.
public enum Pairing: Sendable, Hashable {
    /// This response answers `request`; `latency` is the time between the two frames (proxy mode only).
    case answers(PairedRequest, latency: TimeAmount?)
    /// This response's request id matches no request in flight.
    case unmatched
    /// This request reuses the id of `earlier`, which is still in flight (`Protocol/SPEC.md` [SB-5.4-5]).
    case duplicateRequestID(earlier: PairedRequest)
}

/// Matches responses to requests by request id (`Protocol/SPEC.md` §5.4), for one connection.
///
/// Requests are remembered until a response with their id arrives; responses may come in any order. A request whose
/// id is already in flight is flagged and not remembered: the server answers it with `1014 duplicateRequestId`,
/// and the first response with that id is taken as the answer to the earlier request.
///
/// A recorded stream may hold one direction only (a capture of what a client sent, or of what it received). With
/// ``evidenceRequired`` set, a response is called unmatched only once the stream has shown a request, and requests
/// are called unanswered only if the stream has shown a response, so such captures are not flooded with both.
public struct RequestPairing: Sendable {
    private struct InFlight: Sendable {
        var request: PairedRequest
        var time: NIODeadline?
    }

    private var inFlight: [UInt32: InFlight] = [:]
    private var sawRequest = false
    private var sawResponse = false

    /// Whether unmatched responses and unanswered requests are only reported when the stream holds both directions.
    public let evidenceRequired: Bool

    /// Creates an empty pairing.
    ///
    /// - Parameter evidenceRequired: true for a recorded stream that may hold one direction only; false for a live
    ///   connection, whose two directions are both seen.
    public init(evidenceRequired: Bool = false) {
        self.evidenceRequired = evidenceRequired
    }

    /// Requests seen whose response has not been seen yet.
    public var inFlightCount: Int { self.inFlight.count }

    /// Records a request or pairs a response, and stores what was found in `frame.pairing`.
    ///
    /// - Parameter time: when the frame was complete (proxy mode), for the latency; nil in file mode.
    public mutating func observe(_ frame: inout DumpedFrame, at time: NIODeadline? = nil) {
        guard let id = frame.requestID else { return }
        switch frame.header.kind {
        case .request:
            self.sawRequest = true
            let request = PairedRequest(index: frame.index, offset: frame.offset, op: frame.header.op, requestID: id)
            if let earlier = self.inFlight[id] {
                frame.pairing = .duplicateRequestID(earlier: earlier.request)
            } else {
                self.inFlight[id] = InFlight(request: request, time: time)
            }
        case .response:
            self.sawResponse = true
            if let request = self.inFlight.removeValue(forKey: id) {
                let latency: TimeAmount? = if let start = request.time, let end = time { end - start } else { nil }
                frame.pairing = .answers(request.request, latency: latency)
            } else if self.sawRequest || !self.evidenceRequired {
                frame.pairing = .unmatched
            }
        case .control, .push:
            return
        }
    }

    /// Removes and returns the requests still in flight, oldest first (at the end of a stream or connection).
    public mutating func takeUnanswered() -> [PairedRequest] {
        defer { self.inFlight.removeAll() }
        if self.evidenceRequired && !self.sawResponse { return [] }
        return self.inFlight.values.map(\.request).sorted { $0.index < $1.index }
    }
}
