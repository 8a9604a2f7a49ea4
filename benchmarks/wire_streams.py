"""From a packet capture to the token events of each streamed HTTP exchange, timed by packet stamps.

The pure half of benchmarks/wire_truth.py, in plain Python (struct only) so that it depends on
nothing servebench measures with: a pcap/pcapng reader (Ethernet, Linux cooked v1/v2, BSD
loopback and raw-IP link types; IPv4 and IPv6; TCP), TCP reassembly of each direction of each
connection, HTTP/1.1 message splitting with de-chunking (keep-alive: several exchanges per
connection, in order), SSE event splitting, and the token timing of a stream.

Times are integer nanoseconds of the capture's clock (the kernel's wall clock, CLOCK_REALTIME).
A byte's *delivery* time is when it and every byte before it in its stream had been on the wire:
the earliest capture of the byte (a retransmission does not move it later), raised to the delivery
time of the byte before it (a segment that arrived early, out of order, is usable only once the
hole before it is filled). That is the earliest moment a receiving application could have read it,
so it is the wire's truth for "when did the client get this event".

A token event is an SSE `data:` event whose JSON has a non-empty `choices` list and whose running
`usage.completion_tokens` (vLLM's `continuous_usage_stats`) rose, whatever its text (vLLM sends
`text: ""` for a token that ends inside a UTF-8 sequence).
"""

from __future__ import annotations

import json
import struct
from bisect import bisect_right
from dataclasses import dataclass, field
from pathlib import Path
from typing import Iterator

PCAP_MAGIC = {  # magic as read little-endian -> (byte order, nanosecond stamps)
    0xA1B2C3D4: ("<", False), 0xA1B23C4D: ("<", True), 0xD4C3B2A1: (">", False), 0x4D3CB2A1: (">", True)}
PCAPNG_SHB = 0x0A0D0D0A
PCAPNG_BYTE_ORDER = 0x1A2B3C4D

LINK_NULL, LINK_ETHERNET, LINK_RAW, LINK_SLL, LINK_SLL2, LINK_IPV4, LINK_IPV6 = 0, 1, 101, 113, 276, 228, 229
LINK_RAW_ALIASES = {12, 14}  # DLT_RAW on some systems
ETHERTYPE_IPV4, ETHERTYPE_IPV6, ETHERTYPE_VLAN = 0x0800, 0x86DD, 0x8100
IPV6_EXTENSIONS = {0, 43, 60}  # hop-by-hop, routing, destination options: skipped to reach TCP
TCP_PROTOCOL = 6
SYN, FIN, RST, ACK = 0x02, 0x01, 0x04, 0x10


class CaptureError(ValueError):
    """The capture file (or a stream in it) cannot be read as this module expects."""


@dataclass(frozen=True, slots=True)
class Frame:
    time_ns: int
    link_type: int
    data: bytes          # the captured bytes (at most the snaplen)
    wire_length: int     # the frame's length on the wire


@dataclass(frozen=True, slots=True)
class Segment:
    time_ns: int
    src: tuple[str, int]
    dst: tuple[str, int]
    seq: int
    flags: int
    payload: bytes
    missing: int = 0     # payload bytes the snaplen cut off


# ---------------------------------------------------------------- capture files

def read_frames(source: bytes | Path) -> list[Frame]:
    """Every frame of a pcap or pcapng file (or its bytes), in file order."""
    data = source if isinstance(source, bytes) else Path(source).read_bytes()
    if len(data) < 4:
        raise CaptureError(f"capture of {len(data)} bytes has no file header")
    magic = struct.unpack_from("<I", data)[0]
    if magic == PCAPNG_SHB:
        return list(_pcapng_frames(data))
    if magic in PCAP_MAGIC:
        return list(_pcap_frames(data))
    raise CaptureError(f"not a pcap or pcapng file (magic 0x{magic:08x})")


def _pcap_frames(data: bytes) -> Iterator[Frame]:
    order, nano = PCAP_MAGIC[struct.unpack_from("<I", data)[0]]
    if len(data) < 24:
        raise CaptureError("pcap file header cut short")
    link_type = struct.unpack_from(order + "I", data, 20)[0] & 0x0FFFFFFF  # high bits: FCS length
    scale = 1 if nano else 1000
    pos = 24
    while pos < len(data):
        if pos + 16 > len(data):
            raise CaptureError(f"pcap record header cut short at byte {pos}")
        seconds, fraction, captured, length = struct.unpack_from(order + "IIII", data, pos)
        pos += 16
        if pos + captured > len(data):
            raise CaptureError(f"pcap record at byte {pos - 16} claims {captured} bytes, the file ends first")
        yield Frame(seconds * 1_000_000_000 + fraction * scale, link_type, data[pos:pos + captured], length)
        pos += captured


def _pcapng_frames(data: bytes) -> Iterator[Frame]:
    """Section header, interface description (link type, if_tsresol) and enhanced/simple packet blocks."""
    order = "<"
    interfaces: list[tuple[int, int]] = []  # (link type, timestamp units per second)
    pos = 0
    while pos + 12 <= len(data):
        block_type = struct.unpack_from("<I", data, pos)[0]
        if block_type == PCAPNG_SHB:
            byte_order = data[pos + 8:pos + 12]
            order = "<" if struct.unpack("<I", byte_order)[0] == PCAPNG_BYTE_ORDER else ">"
            interfaces = []
        block_type, length = struct.unpack_from(order + "II", data, pos)
        if length < 12 or pos + length > len(data):
            raise CaptureError(f"pcapng block at byte {pos} has a bad length {length}")
        body = data[pos + 8:pos + length - 4]
        if block_type == 1:  # interface description
            link_type = struct.unpack_from(order + "H", body)[0]
            interfaces.append((link_type, _pcapng_resolution(body[8:], order)))
        elif block_type == 6:  # enhanced packet
            interface, high, low, captured, wire = struct.unpack_from(order + "IIIII", body)
            link_type, units = interfaces[interface]
            stamp = (high << 32) | low
            yield Frame(stamp * 1_000_000_000 // units, link_type, body[20:20 + captured], wire)
        elif block_type == 3:  # simple packet: no timestamp, unusable for timing
            raise CaptureError(f"pcapng simple packet block at byte {pos}: it has no timestamp")
        pos += length


def _pcapng_resolution(options: bytes, order: str) -> int:
    """Timestamp units per second of an interface (option if_tsresol, code 9; default microseconds)."""
    pos = 0
    while pos + 4 <= len(options):
        code, length = struct.unpack_from(order + "HH", options, pos)
        if code == 0:
            break
        if code == 9 and length >= 1:
            value = options[pos + 4]
            return 2 ** (value & 0x7F) if value & 0x80 else 10 ** value
        pos += 4 + (length + 3) // 4 * 4
    return 1_000_000


# ---------------------------------------------------------------- link, IP, TCP

def decode_tcp(frame: Frame) -> Segment | None:
    """The TCP segment in a frame, or None for anything else (ARP, UDP, a fragment)."""
    ip = _network_layer(frame)
    if ip is None or not ip:
        return None
    version = ip[0] >> 4
    if version == 4:
        return _tcp_in_ipv4(frame, ip)
    if version == 6:
        return _tcp_in_ipv6(frame, ip)
    return None


def _network_layer(frame: Frame) -> bytes | None:
    data, link = frame.data, frame.link_type
    if link == LINK_ETHERNET:
        ethertype, pos = struct.unpack_from("!H", data, 12)[0], 14
        while ethertype == ETHERTYPE_VLAN:
            ethertype, pos = struct.unpack_from("!H", data, pos + 2)[0], pos + 4
        return data[pos:] if ethertype in (ETHERTYPE_IPV4, ETHERTYPE_IPV6) else None
    if link == LINK_SLL:
        return data[16:] if struct.unpack_from("!H", data, 14)[0] in (ETHERTYPE_IPV4, ETHERTYPE_IPV6) else None
    if link == LINK_SLL2:
        return data[20:] if struct.unpack_from("!H", data, 0)[0] in (ETHERTYPE_IPV4, ETHERTYPE_IPV6) else None
    if link == LINK_NULL:
        return data[4:]  # the family word is in the capturing host's byte order: the IP version says enough
    if link in (LINK_RAW, LINK_IPV4, LINK_IPV6) or link in LINK_RAW_ALIASES:
        return data
    raise CaptureError(f"link type {link} is not supported (Ethernet, Linux cooked, loopback or raw IP)")


def _tcp_in_ipv4(frame: Frame, ip: bytes) -> Segment | None:
    header = (ip[0] & 0x0F) * 4
    total, fragment, protocol = struct.unpack_from("!H", ip, 2)[0], struct.unpack_from("!H", ip, 6)[0], ip[9]
    if protocol != TCP_PROTOCOL:
        return None
    if fragment & 0x3FFF:  # more fragments, or an offset: never on loopback with its 64 KiB MTU
        raise CaptureError(f"fragmented IPv4 packet at {frame.time_ns} ns: not reassembled")
    src, dst = _ipv4(ip[12:16]), _ipv4(ip[16:20])
    return _tcp(frame, ip[header:total], total - header, src, dst)


def _tcp_in_ipv6(frame: Frame, ip: bytes) -> Segment | None:
    payload_length, next_header = struct.unpack_from("!HB", ip, 4)
    pos = 40
    while next_header in IPV6_EXTENSIONS:
        next_header, length = ip[pos], ip[pos + 1]
        pos += (length + 1) * 8
    if next_header != TCP_PROTOCOL:
        return None
    src, dst = _ipv6(ip[8:24]), _ipv6(ip[24:40])
    return _tcp(frame, ip[pos:40 + payload_length], 40 + payload_length - pos, src, dst)


def _tcp(frame: Frame, tcp: bytes, declared: int, src: str, dst: str) -> Segment:
    if len(tcp) < 20:
        raise CaptureError(f"TCP header cut short at {frame.time_ns} ns: capture with a larger snaplen")
    sport, dport, seq = struct.unpack_from("!HHI", tcp)
    offset, flags = tcp[12] >> 4, tcp[13]
    payload = tcp[offset * 4:]
    missing = max(declared - offset * 4 - len(payload), 0)
    return Segment(frame.time_ns, (src, sport), (dst, dport), seq, flags, payload, missing)


def _ipv4(raw: bytes) -> str:
    return ".".join(str(b) for b in raw)


def _ipv6(raw: bytes) -> str:
    return ":".join(f"{h:x}" for h in struct.unpack("!8H", raw))


# ---------------------------------------------------------------- TCP reassembly

@dataclass
class ByteStream:
    """One direction of a connection, in order, with the delivery time of every byte range."""

    data: bytes
    starts: list[int]    # offset where each range begins (ascending; the first is 0)
    times: list[int]     # its delivery time, ns (non-decreasing)
    hole_at: int | None = None  # the stream stops here: a byte after it was captured, this one never

    def time_at(self, offset: int) -> int:
        if not 0 <= offset < len(self.data):
            raise IndexError(f"offset {offset} outside the stream's {len(self.data)} bytes")
        return self.times[bisect_right(self.starts, offset) - 1]


def reassemble(segments: list[Segment]) -> ByteStream:
    """One direction's segments, in capture order, into its byte stream.

    Sequence numbers count from the SYN when it was captured (data starts at its seq + 1), else
    from the lowest sequence number seen (32-bit wrap-around handled). Every byte keeps its
    first capture; overlapping retransmissions add nothing new.
    """
    carrying = [s for s in segments if s.payload or s.missing]  # bare ACKs, FINs and RSTs carry no bytes
    if not carrying:
        return ByteStream(b"", [], [])
    origin = _stream_origin(segments, carrying)
    placed: list[tuple[int, int, int]] = []   # (start, end, capture time) of bytes first seen in a segment
    extent = max(_relative(s, origin) + len(s.payload) + s.missing for s in carrying)
    data, filled = bytearray(extent), bytearray(extent)
    for segment in carrying:
        start = _relative(segment, origin)
        end = start + len(segment.payload)
        at = filled.find(0, start, end)
        while at >= 0:
            stop = filled.find(1, at, end)
            stop = end if stop < 0 else stop
            data[at:stop] = segment.payload[at - start:stop - start]
            filled[at:stop] = b"\x01" * (stop - at)
            placed.append((at, stop, segment.time_ns))
            at = filled.find(0, stop, end)
    hole = filled.find(0)
    usable = extent if hole < 0 else hole
    starts, times, latest = [], [], 0
    for start, end, stamp in sorted(placed):
        if start >= usable:
            break
        latest = max(latest, stamp)
        if times and times[-1] == latest:
            continue  # same delivery time as the range before: one range
        starts.append(start)
        times.append(latest)
    return ByteStream(bytes(data[:usable]), starts, times, None if hole < 0 else hole)


def _stream_origin(segments: list[Segment], carrying: list[Segment]) -> int:
    """The sequence number of the stream's first data byte: after the SYN, or (the SYN not
    captured) the lowest one a data-carrying segment has."""
    syn = next((s for s in segments if s.flags & SYN), None)
    if syn is not None:
        return (syn.seq + 1) & 0xFFFFFFFF
    first = carrying[0].seq
    lowest = min(_signed(s.seq - first) for s in carrying)
    return (first + lowest) & 0xFFFFFFFF


def _relative(segment: Segment, origin: int) -> int:
    seq = segment.seq + 1 if segment.flags & SYN else segment.seq  # a SYN's data follows its own number
    offset = _signed(seq - origin)
    if offset < 0:
        raise CaptureError(f"segment at {segment.time_ns} ns from {segment.src} lies before its stream's start")
    return offset


def _signed(delta: int) -> int:
    delta &= 0xFFFFFFFF
    return delta - (1 << 32) if delta >= 1 << 31 else delta


@dataclass
class Connection:
    """Both directions of one TCP connection to the server port."""

    index: int
    client: tuple[str, int]
    server: tuple[str, int]
    to_server: list[Segment] = field(default_factory=list)
    to_client: list[Segment] = field(default_factory=list)


def connections(segments: list[Segment], server_port: int) -> list[Connection]:
    """Segments to and from `server_port`, grouped by connection, in order of their first packet.

    A client SYN on an address pair that already carried data starts a new connection (the pair
    reused after a close)."""
    found: list[Connection] = []
    current: dict[tuple, Connection] = {}
    for segment in segments:
        if segment.dst[1] == server_port:
            client, server, outbound = segment.src, segment.dst, True
        elif segment.src[1] == server_port:
            client, server, outbound = segment.dst, segment.src, False
        else:
            continue
        key = (client, server)
        connection = current.get(key)
        opening = outbound and segment.flags & SYN and not segment.flags & ACK
        if connection is None or (opening and any(s.payload for s in connection.to_server)):
            connection = Connection(len(found), client, server)
            found.append(connection)
            current[key] = connection
        (connection.to_server if outbound else connection.to_client).append(segment)
    return found


# ---------------------------------------------------------------- HTTP/1.1

@dataclass
class HttpMessage:
    """One request or response: its head, its (de-chunked) body and where each body byte was in the stream."""

    stream: ByteStream
    offset: int                     # stream offset of the message's first byte
    start_line: str
    headers: dict[str, str]         # lower-case names
    body: bytes
    body_map: list[tuple[int, int]]  # (body offset, stream offset) where each contiguous piece begins
    complete: bool

    @property
    def time_ns(self) -> int:
        """When the message's first byte was on the wire."""
        return self.stream.time_at(self.offset)

    @property
    def status(self) -> int | None:
        parts = self.start_line.split(" ", 2)
        return int(parts[1]) if parts[0].startswith("HTTP/") and len(parts) > 1 and parts[1].isdigit() else None

    def body_time(self, body_offset: int) -> int:
        """Delivery time of a body byte."""
        starts = [b for b, _ in self.body_map]
        body_start, stream_start = self.body_map[bisect_right(starts, body_offset) - 1]
        return self.stream.time_at(stream_start + body_offset - body_start)


def http_messages(stream: ByteStream, responses: bool) -> list[HttpMessage]:
    """The HTTP/1.1 messages one after another in a stream (keep-alive). Responses to a request
    are framed by Transfer-Encoding: chunked, Content-Length, or the end of the stream; 1xx
    interim responses are skipped. The last message may be incomplete (`complete` False)."""
    messages = []
    pos = 0
    while pos < len(stream.data):
        parsed = _message_at(stream, pos, responses)
        if parsed is None:
            break
        message, pos = parsed
        if not (responses and message.status is not None and 100 <= message.status < 200):
            messages.append(message)
        if not message.complete:
            break
    return messages


def _message_at(stream: ByteStream, pos: int, responses: bool) -> tuple[HttpMessage, int] | None:
    """The message starting at `pos` and the offset after it; None if its head is not all there."""
    data = stream.data
    head_end = data.find(b"\r\n\r\n", pos)
    if head_end < 0:
        return None
    lines = data[pos:head_end].decode("latin-1").split("\r\n")
    headers = {}
    for line in lines[1:]:
        name, sep, value = line.partition(":")
        if not sep:
            raise CaptureError(f"HTTP header line without a colon at stream byte {pos}: {line[:80]!r}")
        headers[name.strip().lower()] = value.strip()
    body_start = head_end + 4
    if "chunked" in headers.get("transfer-encoding", "").lower():
        body, body_map, end, complete = _dechunk(data, body_start)
    elif "content-length" in headers:
        length = int(headers["content-length"])
        end = min(body_start + length, len(data))
        body, body_map, complete = data[body_start:end], [(0, body_start)], end - body_start == length
    elif responses and not _bodiless(lines[0]):
        end = len(data)  # until the connection closes
        body, body_map, complete = data[body_start:], [(0, body_start)], stream.hole_at is None
    else:
        end, body, body_map, complete = body_start, b"", [(0, body_start)], True
    return HttpMessage(stream, pos, lines[0], headers, bytes(body), body_map, complete), end


def _bodiless(status_line: str) -> bool:
    parts = status_line.split(" ", 2)
    return len(parts) > 1 and (parts[1] in ("204", "304") or parts[1].startswith("1"))


def _dechunk(data: bytes, pos: int) -> tuple[bytes, list[tuple[int, int]], int, bool]:
    """A chunked body from `pos`: (body, body map, end offset, complete)."""
    body, body_map = bytearray(), []
    while True:
        line_end = data.find(b"\r\n", pos)
        if line_end < 0:
            return bytes(body), body_map or [(0, pos)], len(data), False
        size_text = data[pos:line_end].split(b";", 1)[0].strip()
        try:
            size = int(size_text, 16)
        except ValueError:
            raise CaptureError(f"bad chunk size {size_text[:20]!r} at stream byte {pos}") from None
        if size == 0:
            trailer_end = data.find(b"\r\n\r\n", line_end) if data[line_end + 2:line_end + 4] != b"\r\n" else line_end
            if trailer_end < 0:
                return bytes(body), body_map or [(0, pos)], len(data), False
            return bytes(body), body_map or [(0, pos)], trailer_end + 4, True
        start = line_end + 2
        if start + size + 2 > len(data):
            piece = data[start:start + size]
            body_map.append((len(body), start))
            body += piece
            return bytes(body), body_map, len(data), False
        if data[start + size:start + size + 2] != b"\r\n":
            raise CaptureError(f"chunk at stream byte {start} not followed by CRLF")
        body_map.append((len(body), start))
        body += data[start:start + size]
        pos = start + size + 2


# ---------------------------------------------------------------- SSE and token timing

@dataclass(frozen=True, slots=True)
class SseEvent:
    time_ns: int    # delivery time of the blank line that ends the event
    data: str       # its data lines, joined by newlines


def sse_events(message: HttpMessage) -> list[SseEvent]:
    """Complete events of an event-stream body; lines end in LF or CRLF, events in a blank line."""
    events, data_lines = [], []
    body, pos = message.body, 0
    while True:
        line_end = body.find(b"\n", pos)
        if line_end < 0:
            return events
        line = body[pos:line_end].rstrip(b"\r")
        if not line:
            if data_lines:
                events.append(SseEvent(message.body_time(line_end), "\n".join(data_lines)))
            data_lines = []
        elif line.startswith(b"data:"):
            value = line[5:]
            data_lines.append((value[1:] if value.startswith(b" ") else value).decode())
        pos = line_end + 1


@dataclass
class StreamTiming:
    """The token events of one streamed completion."""

    token_times: list[int] = field(default_factory=list)   # ns, one per token event
    token_counts: list[int] = field(default_factory=list)  # tokens each event added (usage rise)
    first_text_ns: int | None = None                       # first event with non-empty text
    empty_text: list[bool] = field(default_factory=list)   # per token event: its text was ""
    completion_tokens: int | None = None                   # the server's final usage
    choice_events_without_usage: int = 0                   # events a running count cannot time
    done: bool = False                                     # [DONE] arrived

    @property
    def first_token_ns(self) -> int | None:
        return self.token_times[0] if self.token_times else None

    @property
    def last_token_ns(self) -> int | None:
        return self.token_times[-1] if self.token_times else None


def token_timing(events: list[SseEvent]) -> StreamTiming:
    timing, running = StreamTiming(), 0
    for event in events:
        if event.data.strip() == "[DONE]":
            timing.done = True
            continue
        chunk = json.loads(event.data)
        choices = chunk.get("choices") or []
        count = (chunk.get("usage") or {}).get("completion_tokens")
        if count is not None:
            timing.completion_tokens = count
        if not choices:
            continue
        text = choices[0].get("text")
        if text is None:
            text = (choices[0].get("delta") or {}).get("content")
        if text and timing.first_text_ns is None:
            timing.first_text_ns = event.time_ns
        if count is None:
            timing.choice_events_without_usage += 1
        elif count > running:
            timing.token_times.append(event.time_ns)
            timing.token_counts.append(count - running)
            timing.empty_text.append(not text)
            running = count
    return timing


# ---------------------------------------------------------------- exchanges

@dataclass
class WireExchange:
    """One request and its response on one connection, as the wire saw them."""

    connection: int
    position: int            # its place on the connection (0: the first request)
    request: HttpMessage
    response: HttpMessage | None
    timing: StreamTiming | None

    @property
    def sent_ns(self) -> int:
        return self.request.time_ns


def exchanges(capture: bytes | Path, server_port: int) -> list[WireExchange]:
    """Every request to `server_port` in a capture, paired with its response (HTTP/1.1 answers in
    request order on a connection), in order of the requests' first bytes."""
    segments = [s for s in (decode_tcp(f) for f in read_frames(capture)) if s is not None]
    found = []
    for connection in connections(segments, server_port):
        requests = http_messages(reassemble(connection.to_server), responses=False)
        responses = http_messages(reassemble(connection.to_client), responses=True)
        for position, request in enumerate(requests):
            response = responses[position] if position < len(responses) else None
            timing = token_timing(sse_events(response)) if response is not None and response.status == 200 else None
            found.append(WireExchange(connection.index, position, request, response, timing))
    return sorted(found, key=lambda e: e.sent_ns)
