"""The pure half of benchmarks/wire_truth.py (benchmarks/wire_streams.py): capture files, TCP
reassembly, HTTP framing and SSE token timing, on byte strings built here. The benchmark itself
(a real vLLM server under tcpdump) is run by hand: it needs root and minutes."""

from __future__ import annotations

import json
import struct

import pytest

from benchmarks.wire_streams import (
    ACK,
    FIN,
    SYN,
    ByteStream,
    CaptureError,
    Frame,
    Segment,
    connections,
    decode_tcp,
    exchanges,
    http_messages,
    read_frames,
    reassemble,
    sse_events,
    token_timing,
)

CLIENT, SERVER = ("127.0.0.1", 40000), ("127.0.1.1", 8000)
PSH = 0x08


# ---------------------------------------------------------------- building captures

def ipv4_tcp(src: tuple[str, int], dst: tuple[str, int], seq: int, flags: int, payload: bytes = b"") -> bytes:
    tcp = struct.pack("!HHIIBBHHH", src[1], dst[1], seq, 0, 5 << 4, flags, 65535, 0, 0) + payload
    ip = struct.pack("!BBHHHBBH4s4s", 0x45, 0, 20 + len(tcp), 0, 0x4000, 64, 6, 0,
                     bytes(map(int, src[0].split("."))), bytes(map(int, dst[0].split("."))))
    return ip + tcp


def ethernet(ip: bytes, pad_to: int = 0) -> bytes:
    frame = b"\x00" * 12 + struct.pack("!H", 0x0800) + ip
    return frame + b"\x00" * max(pad_to - len(frame), 0)  # a short frame's padding is not TCP payload


def pcap(frames: list[tuple[int, bytes]], nano: bool = True, link: int = 1, snaplen: int = 262144) -> bytes:
    """A pcap file: (time ns, frame) each; a frame longer than the snaplen is cut, as tcpdump would."""
    out = struct.pack("<IHHiIII", 0xA1B23C4D if nano else 0xA1B2C3D4, 2, 4, 0, 0, snaplen, link)
    for stamp, frame in frames:
        seconds, rest = divmod(stamp, 1_000_000_000)
        kept = frame[:snaplen]
        out += struct.pack("<IIII", seconds, rest if nano else rest // 1000, len(kept), len(frame)) + kept
    return out


def pcapng(frames: list[tuple[int, bytes]], tsresol: int | None = 9, link: int = 1) -> bytes:
    def block(kind: int, body: bytes) -> bytes:
        body += b"\x00" * (-len(body) % 4)
        return struct.pack("<II", kind, len(body) + 12) + body + struct.pack("<I", len(body) + 12)

    section = block(0x0A0D0D0A, struct.pack("<IHHq", 0x1A2B3C4D, 1, 0, -1))
    options = (struct.pack("<HHB3x", 9, 1, tsresol) if tsresol is not None else b"") + struct.pack("<HH", 0, 0)
    interface = block(1, struct.pack("<HHI", link, 0, 262144) + options)
    units = 10 ** (tsresol if tsresol is not None else 6)
    packets = b""
    for stamp, frame in frames:
        ticks = stamp * units // 1_000_000_000
        packets += block(6, struct.pack("<IIIII", 0, ticks >> 32, ticks & 0xFFFFFFFF, len(frame), len(frame)) + frame)
    return section + interface + packets


def segment(seq: int, payload: bytes, time_ns: int, src=CLIENT, dst=SERVER, flags: int = ACK | PSH) -> Segment:
    return Segment(time_ns, src, dst, seq, flags, payload)


def stream_of(data: bytes, cuts: list[int], times: list[int]) -> ByteStream:
    """A stream delivered in pieces: bytes [cuts[i], cuts[i+1]) at times[i]."""
    return reassemble([segment(1000 + a, data[a:b], t) for a, b, t in zip(cuts, [*cuts[1:], len(data)], times)])


def chunked(*pieces: bytes) -> bytes:
    return b"".join(f"{len(p):x}\r\n".encode() + p + b"\r\n" for p in pieces) + b"0\r\n\r\n"


def event(text: str | None, completion_tokens: int | None, choices: bool = True, chat: bool = False) -> bytes:
    body: dict = {"id": "cmpl-1", "object": "text_completion"}
    if choices:
        choice = {"index": 0, "delta": {"content": text} if text is not None else {"role": "assistant"}} if chat \
            else {"index": 0, "text": text, "finish_reason": None}
        body["choices"] = [choice]
    else:
        body["choices"] = []
    if completion_tokens is not None:
        body["usage"] = {"prompt_tokens": 8, "completion_tokens": completion_tokens,
                         "total_tokens": 8 + completion_tokens}
    return b"data: " + json.dumps(body).encode() + b"\n\n"


RESPONSE_HEAD = (b"HTTP/1.1 200 OK\r\ncontent-type: text/event-stream; charset=utf-8\r\n"
                 b"transfer-encoding: chunked\r\n\r\n")


def request(body: bytes) -> bytes:
    return (b"POST /v1/completions HTTP/1.1\r\nHost: 127.0.1.1:8000\r\nContent-Type: application/json\r\n"
            b"Content-Length: " + str(len(body)).encode() + b"\r\n\r\n" + body)


# ---------------------------------------------------------------- capture files and decoding

@pytest.mark.parametrize("nano", [True, False])
def test_pcap_records_keep_their_stamps_and_link_type(nano):
    frames = [(1_764_000_000_123_456_789, ethernet(ipv4_tcp(CLIENT, SERVER, 1, ACK, b"x"))),
              (1_764_000_001_000_001_000, ethernet(ipv4_tcp(SERVER, CLIENT, 9, ACK)))]
    read = read_frames(pcap(frames, nano=nano))
    assert [f.link_type for f in read] == [1, 1]
    assert read[0].time_ns == (1_764_000_000_123_456_789 if nano else 1_764_000_000_123_456_000)
    assert read[1].time_ns == 1_764_000_001_000_001_000
    assert read[0].data == frames[0][1]


@pytest.mark.parametrize("tsresol", [9, 6, None])
def test_pcapng_blocks_with_their_interfaces_resolution(tsresol):
    stamp = 1_764_000_000_123_456_789
    read = read_frames(pcapng([(stamp, ethernet(ipv4_tcp(CLIENT, SERVER, 1, ACK, b"hi")))], tsresol=tsresol))
    assert len(read) == 1 and read[0].link_type == 1
    assert read[0].time_ns == (stamp if tsresol == 9 else stamp // 1000 * 1000)
    assert decode_tcp(read[0]).payload == b"hi"


def test_not_a_capture_and_cut_records_are_named():
    with pytest.raises(CaptureError, match="not a pcap or pcapng"):
        read_frames(b"GIF89a....")
    whole = pcap([(1, ethernet(ipv4_tcp(CLIENT, SERVER, 1, ACK, b"abcdef")))])
    with pytest.raises(CaptureError, match="the file ends first"):
        read_frames(whole[:-3])


def test_ipv4_over_ethernet_drops_the_frames_padding():
    frame = Frame(5, 1, ethernet(ipv4_tcp(CLIENT, SERVER, 77, ACK | PSH, b"ab"), pad_to=64), 64)
    seg = decode_tcp(frame)
    assert (seg.src, seg.dst, seg.seq, seg.payload, seg.missing) == (CLIENT, SERVER, 77, b"ab", 0)


def test_linux_cooked_and_ipv6_and_raw_links():
    ipv4 = ipv4_tcp(CLIENT, SERVER, 5, ACK, b"four")
    sll = b"\x00\x00\x03\x04\x00\x06" + b"\x00" * 8 + struct.pack("!H", 0x0800)
    assert decode_tcp(Frame(0, 113, sll + ipv4, 0)).payload == b"four"
    tcp = struct.pack("!HHIIBBHHH", 40000, 8000, 5, 0, 5 << 4, ACK, 65535, 0, 0) + b"six"
    ipv6 = struct.pack("!IHBB", 6 << 28, len(tcp), 6, 64) + b"\x00" * 15 + b"\x01" + b"\x00" * 15 + b"\x01" + tcp
    sll2 = struct.pack("!HH", 0x86DD, 0) + b"\x00" * 16
    seg = decode_tcp(Frame(0, 276, sll2 + ipv6, 0))
    assert seg.src == ("0:0:0:0:0:0:0:1", 40000) and seg.payload == b"six"
    assert decode_tcp(Frame(0, 101, ipv4, 0)).payload == b"four"
    with pytest.raises(CaptureError, match="link type 147"):
        decode_tcp(Frame(0, 147, ipv4, 0))


def test_a_snaplen_cut_payload_leaves_a_hole_not_wrong_bytes():
    frames = [(1, ethernet(ipv4_tcp(CLIENT, SERVER, 100, ACK, b"A" * 40))),
              (2, ethernet(ipv4_tcp(CLIENT, SERVER, 140, ACK, b"B" * 10)))]
    segments = [decode_tcp(f) for f in read_frames(pcap(frames, snaplen=14 + 40 + 20))]
    assert segments[0].missing == 20
    stream = reassemble(segments)
    assert stream.data == b"A" * 20 and stream.hole_at == 20


# ---------------------------------------------------------------- TCP reassembly

def test_in_order_segments_after_a_syn():
    syn = segment(999, b"", 1, flags=SYN)
    stream = reassemble([syn, segment(1000, b"hello ", 10), segment(1006, b"world", 20), segment(1011, b"", 30)])
    assert stream.data == b"hello world" and stream.hole_at is None
    assert [stream.time_at(i) for i in (0, 5, 6, 10)] == [10, 10, 20, 20]


def test_an_early_out_of_order_segment_is_delivered_when_the_hole_fills():
    stream = reassemble([segment(1000, b"aaaa", 10), segment(1008, b"cccc", 20), segment(1004, b"bbbb", 30)])
    assert stream.data == b"aaaabbbbcccc"
    assert [stream.time_at(i) for i in (3, 4, 8, 11)] == [10, 30, 30, 30]  # c's arrived at 20, usable at 30


def test_retransmissions_keep_each_bytes_first_capture():
    stream = reassemble([segment(1000, b"abcdef", 10), segment(1000, b"abcdef", 50),     # whole
                         segment(1004, b"efgh", 60), segment(1002, b"cdefghij", 70)])    # partial, new bytes after
    assert stream.data == b"abcdefghij"
    assert [stream.time_at(i) for i in (0, 5, 6, 7, 8, 9)] == [10, 10, 60, 60, 70, 70]


def test_a_missing_segment_stops_the_stream_at_its_hole():
    stream = reassemble([segment(1000, b"abc", 10), segment(1006, b"ghi", 20)])
    assert stream.data == b"abc" and stream.hole_at == 3


def test_sequence_numbers_wrap_around():
    isn = 0xFFFFFFFD
    stream = reassemble([segment(isn, b"", 1, flags=SYN), segment(0xFFFFFFFE, b"ab", 2), segment(0, b"cd", 3)])
    assert stream.data == b"abcd" and [stream.time_at(i) for i in range(4)] == [2, 2, 3, 3]


def test_without_its_syn_a_stream_starts_at_its_lowest_sequence_number():
    stream = reassemble([segment(0, b"cd", 3), segment(0xFFFFFFFE, b"ab", 2)])
    assert stream.data == b"abcd" and [stream.time_at(i) for i in range(4)] == [2, 2, 3, 3]


def test_connections_by_address_pair_and_a_reused_pair_is_a_new_connection():
    other = ("127.0.0.1", 40001)
    segs = [segment(10, b"", 1, flags=SYN), segment(11, b"GET", 2),
            segment(500, b"", 3, src=other, flags=SYN), segment(7, b"ok", 4, src=SERVER, dst=CLIENT),
            segment(14, b"", 5, flags=FIN | ACK),
            segment(900, b"", 6, flags=SYN), segment(901, b"PUT", 7),
            segment(1, b"x", 8, src=("127.0.0.1", 5555), dst=("127.0.0.1", 6666))]   # another port: not ours
    found = connections(segs, server_port=8000)
    assert [(c.index, c.client) for c in found] == [(0, CLIENT), (1, other), (2, CLIENT)]
    assert reassemble(found[0].to_server).data == b"GET" and reassemble(found[0].to_client).data == b"ok"
    assert reassemble(found[2].to_server).data == b"PUT"


# ---------------------------------------------------------------- HTTP

def test_keep_alive_requests_by_content_length():
    first, second = b'{"prompt": [1, 2]}', b'{"prompt": [3]}'
    data = request(first) + request(second)
    cut = len(request(first)) + 10
    messages = http_messages(stream_of(data, [0, cut], [100, 200]), responses=False)
    assert [m.body for m in messages] == [first, second]
    assert [m.time_ns for m in messages] == [100, 100]  # the second request's first byte came in the first packet
    assert messages[0].start_line == "POST /v1/completions HTTP/1.1" and messages[0].headers["host"] == "127.0.1.1:8000"


def test_chunked_responses_dechunked_with_every_body_bytes_stamp():
    body1, body2 = [b"data: one\n\n", b"data: two\n\n"], [b"data: three\n\n"]
    first = RESPONSE_HEAD + chunked(*body1)
    data = first + RESPONSE_HEAD + chunked(*body2)
    # packets: head and half the first chunk's size line | rest of chunk 1 | chunk 2 and response 2's head | rest
    cut_a = len(RESPONSE_HEAD) + 1
    cut_b = len(RESPONSE_HEAD) + len(chunked(body1[0])) - 5
    cut_c = len(first) + len(RESPONSE_HEAD) + 3
    stream = stream_of(data, [0, cut_a, cut_b, cut_c], [10, 20, 30, 40])
    responses = http_messages(stream, responses=True)
    assert [r.body for r in responses] == [b"".join(body1), b"".join(body2)]
    assert all(r.complete and r.status == 200 for r in responses)
    one, two = responses
    assert one.body_time(0) == 20 and one.body_time(len(body1[0]) - 1) == 20 and one.body_time(len(body1[0])) == 30
    assert two.time_ns == 30 and two.body_time(0) == 40


def test_an_incomplete_last_response_says_so():
    data = RESPONSE_HEAD + b"b\r\ndata: one\n\n\r\n5\r\nda"
    (response,) = http_messages(stream_of(data, [0], [1]), responses=True)
    assert not response.complete and response.body == b"data: one\n\nda"


def test_interim_responses_are_skipped_and_a_bad_chunk_size_is_named():
    data = b"HTTP/1.1 100 Continue\r\n\r\n" + RESPONSE_HEAD + chunked(b"data: x\n\n")
    (response,) = http_messages(stream_of(data, [0], [1]), responses=True)
    assert response.status == 200 and response.body == b"data: x\n\n"
    with pytest.raises(CaptureError, match="bad chunk size"):
        http_messages(stream_of(RESPONSE_HEAD + b"zz\r\nabc\r\n", [0], [1]), responses=True)


# ---------------------------------------------------------------- SSE and token timing

def response_with(events: list[bytes], times: list[int]):
    """One response whose i-th SSE event arrives (its own chunk) in a packet at times[i]."""
    head = RESPONSE_HEAD
    pieces = [f"{len(e):x}\r\n".encode() + e + b"\r\n" for e in events]
    data = head + b"".join(pieces) + b"0\r\n\r\n"
    cuts, at = [0], len(head) + len(pieces[0])
    for piece in pieces[1:]:
        cuts.append(at)
        at += len(piece)
    (response,) = http_messages(stream_of(data, cuts, times), responses=True)
    return response


def test_token_events_are_usage_rises_whatever_their_text():
    events = [event("", 1), event("Hi", 2), event("", 3), event(" there", 5), event("", 6),
              event(None, 6, choices=False), b"data: [DONE]\n\n"]
    timing = token_timing(sse_events(response_with(events, [10, 20, 30, 40, 50, 60, 70])))
    assert timing.token_times == [10, 20, 30, 40, 50]        # empty text first and last: still tokens
    assert timing.token_counts == [1, 1, 1, 2, 1]
    assert timing.empty_text == [True, False, True, False, True]
    assert (timing.first_token_ns, timing.last_token_ns, timing.first_text_ns) == (10, 50, 20)
    assert timing.completion_tokens == 6 and timing.done


def test_a_chat_streams_role_only_chunk_is_not_a_token():
    events = [event(None, 0, chat=True), event("", 1, chat=True), event("a", 2, chat=True),
              event(None, 2, choices=False), b"data: [DONE]\n\n"]
    timing = token_timing(sse_events(response_with(events, [5, 10, 20, 30, 40])))
    assert timing.token_times == [10, 20] and timing.first_text_ns == 20 and timing.completion_tokens == 2


def test_an_event_split_across_packets_is_timed_by_its_last_byte():
    body = event("x", 1) + event("y", 2)
    data = RESPONSE_HEAD + chunked(body)
    split_in_first = len(RESPONSE_HEAD) + 6 + 20        # inside the first event
    end_of_first = len(RESPONSE_HEAD) + 4 + len(event("x", 1)) - 1   # its final newline
    stream = stream_of(data, [0, split_in_first, end_of_first], [10, 20, 30])
    events = sse_events(http_messages(stream, responses=True)[0])
    assert [e.time_ns for e in events] == [30, 30]


def test_events_without_running_usage_are_counted_not_timed():
    timing = token_timing(sse_events(response_with([event("a", None), event("b", None)], [1, 2])))
    assert timing.token_times == [] and timing.choice_events_without_usage == 2 and not timing.done


def test_crlf_lines_and_multi_line_data():
    body = b"data: {\"choices\": [{\"text\": \"\"}],\r\ndata: \"usage\": {\"completion_tokens\": 1}}\r\n\r\n"
    (e,) = sse_events(response_with([body], [7]))
    assert e.time_ns == 7 and token_timing([e]).token_times == [7]


# ---------------------------------------------------------------- a whole capture

def test_exchanges_of_a_capture_pair_requests_and_responses_per_connection():
    other = ("127.0.0.1", 40001)
    req_a, req_b, req_c = (request(json.dumps({"prompt": [n]}).encode()) for n in (1, 2, 3))
    resp = RESPONSE_HEAD + chunked(event("", 1), event("z", 2), event(None, 2, choices=False), b"data: [DONE]\n\n")
    half = len(resp) // 2

    def frame(t, src, dst, seq, flags, payload=b""):
        return (t, ethernet(ipv4_tcp(src, dst, seq, flags, payload)))

    frames = [frame(1_000, CLIENT, SERVER, 99, SYN), frame(1_001, SERVER, CLIENT, 499, SYN | ACK),
              frame(1_002, CLIENT, SERVER, 100, ACK, req_a),
              frame(1_500, other, SERVER, 0, SYN), frame(1_501, SERVER, other, 7000, SYN | ACK),
              frame(1_502, other, SERVER, 1, ACK, req_c),
              frame(2_000, SERVER, CLIENT, 500, ACK, resp[:half]), frame(3_000, SERVER, CLIENT, 500 + half, ACK,
                                                                          resp[half:]),
              frame(3_100, SERVER, other, 7001, ACK, resp),
              frame(4_000, CLIENT, SERVER, 100 + len(req_a), ACK, req_b),
              frame(5_000, SERVER, CLIENT, 500 + len(resp), ACK, resp)]
    found = exchanges(pcap(frames), server_port=8000)
    assert [json.loads(e.request.body)["prompt"] for e in found] == [[1], [3], [2]]   # by send time
    assert [(e.connection, e.position) for e in found] == [(0, 0), (1, 0), (0, 1)]
    assert [e.sent_ns for e in found] == [1_002, 1_502, 4_000]
    assert [e.timing.token_times for e in found] == [[2_000, 3_000], [3_100, 3_100], [5_000, 5_000]]
    assert all(e.timing.completion_tokens == 2 and e.timing.done for e in found)


# ---------------------------------------------------------------- matching servebench's records to the wire

def test_records_matched_by_prompt_and_compared_per_request():
    """Two requests sent in reverse index order on one connection; servebench's stamps are the wire's
    moved by known amounts (send 0.05 ms early, every token 0.2 ms late): the differences say so, and
    a token count that disagrees with the server's usage is a problem."""
    from benchmarks.wire_truth import ClockOffset, differences, match, request_problems
    from servebench.load.config import LoadConfig
    from servebench.load.workload import Workload, request_body

    config = LoadConfig(base_url="http://127.0.1.1:8000", model="tiny", rate=2, requests=2, input_len=4,
                        output_len=2, request_extras={"ignore_eos": True})
    workload = Workload(endpoint="completions", input_len=4, output_len=2, vocab_size=config.vocab_size,
                        data_seed=0, tokenizer=None, prompts_file=None, sharegpt_file=None)
    bodies = [request_body("tiny", "completions", workload.item(i), config.request_extras) for i in range(2)]
    resp = RESPONSE_HEAD + chunked(event("", 1), event("z", 2), event(None, 2, choices=False), b"data: [DONE]\n\n")
    cut = len(RESPONSE_HEAD) + len(chunked(event("", 1))) - 8   # the first event's last newline: the second packet
    base = 1_764_000_000_000_000_000
    frames = [(base, ethernet(ipv4_tcp(CLIENT, SERVER, 99, SYN))),
              (base + 1_000_000, ethernet(ipv4_tcp(CLIENT, SERVER, 100, ACK, request(bodies[1])))),
              (base + 11_000_000, ethernet(ipv4_tcp(SERVER, CLIENT, 1, ACK, resp[:cut]))),
              (base + 12_000_000, ethernet(ipv4_tcp(SERVER, CLIENT, 1 + cut, ACK, resp[cut:]))),
              (base + 20_000_000, ethernet(ipv4_tcp(CLIENT, SERVER, 100 + len(request(bodies[1])), ACK,
                                                    request(bodies[0])))),
              (base + 30_000_000, ethernet(ipv4_tcp(SERVER, CLIENT, 1 + len(resp), ACK, resp)))]
    wire = exchanges(pcap(frames), server_port=8000)
    clock, t0 = ClockOffset(offset_ns=base - 5_000_000_000, width_ns=50), 5.0   # the wire's base is monotonic 5 s

    def record(index: int, sent_ms: float, tokens_ms: list[float], output_tokens: int = 2) -> dict:
        sent, times = (sent_ms - 0.05) / 1e3, [(t + 0.2) / 1e3 for t in tokens_ms]
        return {"index": index, "sent_s": sent, "first_token_s": times[0], "last_token_s": times[-1],
                "output_tokens": output_tokens, "chunk_times": times, "chunk_tokens": [1] * len(times),
                "error_kind": None, "error": None, "first_text_s": times[1]}

    result = {"requests": [record(0, 20, [30, 30], output_tokens=3), record(1, 1, [12, 12])]}
    pairs, problems = match(result, config, wire)
    assert problems == [] and [(p.index, p.wire.connection, p.wire.position) for p in pairs] == [(0, 0, 1), (1, 0, 0)]
    assert request_problems(pairs[1]) == []
    assert request_problems(pairs[0]) == ["request 0: servebench counted 3 tokens, the server's usage says 2"]
    diffs = differences([pairs[1]], t0, clock)
    assert diffs["TTFT"] == pytest.approx([0.25]) and diffs["E2EL"] == pytest.approx([0.25])
    assert diffs["TPOT"] == pytest.approx([0.0]) and diffs['TTFT, first token ""'] == pytest.approx([0.25])
    assert diffs["send stamp"] == pytest.approx([-0.05], abs=1e-6)
    assert diffs["each token stamp"] == pytest.approx([0.2, 0.2], abs=1e-6)
    assert diffs['E2EL, last token ""'] == []   # its last token event had text


def test_a_prompt_the_run_never_sent_and_a_request_the_wire_never_saw_are_named():
    from benchmarks.wire_truth import match
    from servebench.load.config import LoadConfig

    config = LoadConfig(base_url="http://127.0.1.1:8000", model="tiny", rate=2, requests=1, input_len=4)
    frames = [(1, ethernet(ipv4_tcp(CLIENT, SERVER, 99, SYN))),
              (2, ethernet(ipv4_tcp(CLIENT, SERVER, 100, ACK, request(b'{"prompt": [5, 6, 7, 8]}'))))]
    pairs, problems = match({"requests": [{"index": 0}]}, config, exchanges(pcap(frames), server_port=8000))
    assert pairs == [] and problems == ["connection 0 request 0: a prompt of no request in the run",
                                        "request 0: not seen on the wire"]
