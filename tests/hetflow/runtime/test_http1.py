"""The lean HTTP/1.1 client against a scripted server that writes raw bytes: framing, keep-alive, a stale
kept-alive connection sent again, a stream left early closing its connection, and each failure's error."""

from __future__ import annotations

import asyncio
import socket
import struct

import pytest

from hetflow.runtime.http1 import (
    Http1Client,
    HttpClosed,
    HttpConnectError,
    HttpConnectTimeout,
    HttpInvalidRequest,
    HttpProtocolError,
    HttpStatusError,
    HttpTimeout,
    _whole_chunks,
    split_url,
)
from tests.scripted_http import ScriptedServer


def _reply(body: bytes, extra: str = "") -> bytes:
    return f"HTTP/1.1 200 OK\r\ncontent-length: {len(body)}\r\n{extra}\r\n".encode() + body


def _chunk(data: bytes) -> bytes:
    return f"{len(data):x}\r\n".encode() + data + b"\r\n"


async def _write(writer: asyncio.StreamWriter, data: bytes) -> None:
    writer.write(data)
    await writer.drain()


async def test_a_sized_reply_is_read_whole_and_its_connection_kept_for_the_next():
    async def handler(reader, writer, body):
        await _write(writer, _reply(b"metrics page " + body))
        return True

    async with ScriptedServer(handler) as server:
        client = Http1Client(read_timeout_s=5)
        first = await client.get(f"{server.url}/metrics")
        second = await client.request("POST", f"{server.url}/tokenize", body=b"xyz")
        assert (first.status, first.content, second.content) == (200, b"metrics page ", b"metrics page xyz")
        assert server.connections == 1 and client.connections_opened == 1
        assert server.heads[0].startswith(b"GET /metrics HTTP/1.1\r\nhost: 127.0.0.1:")
        await client.aclose()


async def test_chunks_that_arrive_together_are_one_piece_and_split_chunks_are_joined():
    async def handler(reader, writer, body):
        await _write(writer, b"HTTP/1.1 200 OK\r\ntransfer-encoding: chunked\r\n\r\n")
        await _write(writer, _chunk(b"data: a\n\n") + _chunk(b"data: b\n\n"))
        await asyncio.sleep(0.05)
        split = _chunk(b"data: c\n\n")
        await _write(writer, split[:5])
        await asyncio.sleep(0.05)
        await _write(writer, split[5:] + b"0\r\nx-trailer: 1\r\n\r\n")
        return True

    async with ScriptedServer(handler) as server:
        client = Http1Client(read_timeout_s=5)
        async with client.stream("POST", f"{server.url}/v1/completions", body=b"{}") as reply:
            pieces = [piece async for piece in reply.iter_bytes()]
        assert pieces == [b"data: a\n\ndata: b\n\n", b"data: c\n\n"]
        await client.get(f"{server.url}/again")
        assert server.connections == 1  # the chunked body ended cleanly: its connection was kept
        await client.aclose()


def test_chunk_framing_is_checked():
    assert _whole_chunks(_chunk(b"ab") + b"0\r\n\r\n") == ([b"ab"], 12, True)
    assert _whole_chunks(_chunk(b"ab")[:4]) == ([], 0, False)
    with pytest.raises(HttpProtocolError):
        _whole_chunks(b"zz\r\nab\r\n")
    with pytest.raises(HttpProtocolError):
        _whole_chunks(b"2\r\nabXX")


async def test_a_stream_left_before_its_end_closes_its_connection():
    async def handler(reader, writer, body):
        await _write(writer, b"HTTP/1.1 200 OK\r\ntransfer-encoding: chunked\r\n\r\n" + _chunk(b"data: a\n\n"))
        if not await reader.read():  # the client closed the connection
            server.closed_by_client.set()
        return False

    async with ScriptedServer(handler) as server:
        client = Http1Client(read_timeout_s=5)
        async with client.stream("POST", f"{server.url}/v1/completions", body=b"{}") as reply:
            async for _ in reply.iter_bytes():
                break
        await asyncio.wait_for(server.closed_by_client.wait(), 5)  # the server saw its client go
        assert client._idle.get(split_url(server.url)[0], []) == []
        await client.aclose()


async def test_a_kept_alive_connection_the_server_closed_is_replaced_and_the_request_sent_again():
    async def handler(reader, writer, body):
        if len(server.heads) == 2:  # the server's keep-alive ran out as the second request came: no reply
            return False
        await _write(writer, _reply(b"ok"))
        return True

    async with ScriptedServer(handler) as server:
        client = Http1Client(read_timeout_s=5)
        assert (await client.get(f"{server.url}/a")).content == b"ok"
        assert (await client.get(f"{server.url}/b")).content == b"ok"
        assert server.connections == 2 and len(server.heads) == 3
        await client.aclose()


async def test_connection_close_and_close_delimited_replies_are_not_kept():
    async def handler(reader, writer, body):
        if len(server.heads) == 1:
            await _write(writer, _reply(b"once", "connection: close\r\n"))
        else:
            await _write(writer, b"HTTP/1.1 200 OK\r\n\r\nuntil the end")
        return False

    async with ScriptedServer(handler) as server:
        client = Http1Client(read_timeout_s=5)
        assert (await client.get(f"{server.url}/a")).content == b"once"
        assert (await client.get(f"{server.url}/b")).content == b"until the end"
        assert server.connections == 2
        await client.aclose()


async def test_no_body_for_204_and_an_error_status_raises_on_request():
    async def handler(reader, writer, body):
        if len(server.heads) == 1:
            await _write(writer, b"HTTP/1.1 204 No Content\r\n\r\n")
        else:
            await _write(writer, b"HTTP/1.1 503 Busy\r\ncontent-length: 4\r\n\r\nbusy")
        return True

    async with ScriptedServer(handler) as server:
        client = Http1Client(read_timeout_s=5)
        assert (await client.get(f"{server.url}/a")).content == b""
        busy = await client.get(f"{server.url}/b")
        with pytest.raises(HttpStatusError, match="503: busy"):
            busy.raise_for_status()
        assert server.connections == 1
        await client.aclose()


async def test_failures_have_their_own_errors():
    async def handler(reader, writer, body):
        path = server.heads[-1].split(b" ")[1]
        if path == b"/slow":
            await asyncio.sleep(5)
        elif path == b"/garbage":
            await _write(writer, b"SMTP ready\r\n\r\n")
        elif path == b"/short":
            await _write(writer, b"HTTP/1.1 200 OK\r\ncontent-length: 10\r\n\r\nabc")
        return False

    async with ScriptedServer(handler) as server:
        client = Http1Client(read_timeout_s=5)
        with pytest.raises(HttpTimeout):
            await client.get(f"{server.url}/slow", timeout_s=0.1)
        with pytest.raises(HttpProtocolError):
            await client.get(f"{server.url}/garbage")
        with pytest.raises(HttpClosed):
            await client.get(f"{server.url}/short")
        with pytest.raises(HttpClosed):  # a new connection that closes with no reply: not sent again
            await client.get(f"{server.url}/nothing")
        await client.aclose()
        url = server.url
    with pytest.raises(HttpConnectError):  # nothing listens there now
        await Http1Client(read_timeout_s=1).get(url)
    with pytest.raises(ValueError):
        split_url("ftp://host/x")


async def test_a_kept_alive_connection_whose_request_failed_is_closed_not_kept():
    async def handler(reader, writer, body):
        if len(server.heads) == 2:  # the second request times out on the kept-alive connection
            if not await reader.read():
                server.closed_by_client.set()
            return False
        await _write(writer, _reply(b"ok"))
        return True

    async with ScriptedServer(handler) as server:
        client = Http1Client(read_timeout_s=5)
        await client.get(f"{server.url}/a")
        with pytest.raises(HttpTimeout):
            await client.get(f"{server.url}/slow", timeout_s=0.1)
        await asyncio.wait_for(server.closed_by_client.wait(), 5)  # its connection was closed, not leaked
        assert (await client.get(f"{server.url}/c")).content == b"ok" and server.connections == 2
        await client.aclose()


async def test_a_header_that_would_break_the_framing_is_refused_before_anything_is_sent():
    async def handler(reader, writer, body):
        await _write(writer, _reply(b"ok"))
        return True

    async with ScriptedServer(handler) as server:
        client = Http1Client(read_timeout_s=5)
        for value in ("id\r\nx-injected: 1", "caf\u00e9\u2603"):
            with pytest.raises(ValueError):
                await client.request("POST", f"{server.url}/v1/completions", body=b"{}",
                                     headers={"x-request-id": value})
        assert server.heads == [] and server.connections == 0
        await client.aclose()


async def test_a_reset_after_part_of_the_reply_came_is_not_taken_for_a_lost_request():
    async def handler(reader, writer, body):
        if len(server.heads) == 1:
            await _write(writer, _reply(b"ok"))
            return True
        await _write(writer, b"HTTP/1.1 200 OK\r\ncontent-")  # part of the head, then a reset
        await asyncio.sleep(0.05)
        writer.get_extra_info("socket").setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
        return False

    async with ScriptedServer(handler) as server:
        client = Http1Client(read_timeout_s=5)
        await client.get(f"{server.url}/a")
        with pytest.raises(HttpClosed):
            await client.request("POST", f"{server.url}/v1/completions", body=b"{}")
        assert len(server.heads) == 2  # not sent again: the server had begun to answer it
        await client.aclose()


async def test_a_slow_connect_is_a_timeout_not_an_unreachable_server(monkeypatch):
    async def never_connects(*args, **kwargs):
        await asyncio.sleep(60)

    monkeypatch.setattr(asyncio, "open_connection", never_connects)
    client = Http1Client(read_timeout_s=5, connect_timeout_s=0.05)
    with pytest.raises(HttpConnectTimeout) as raised:
        await client.get("http://127.0.0.1:9/metrics")
    assert isinstance(raised.value, HttpTimeout) and not isinstance(raised.value, HttpConnectError)
    with pytest.raises(HttpInvalidRequest):
        await client.get("ftp://127.0.0.1/x")


async def test_requests_past_the_connection_bound_wait_their_turn():
    in_progress, most = 0, 0

    async def handler(reader, writer, body):
        nonlocal in_progress, most
        in_progress += 1
        most = max(most, in_progress)
        await asyncio.sleep(0.02)
        in_progress -= 1
        await _write(writer, _reply(b"ok"))
        return True

    async with ScriptedServer(handler) as server:
        client = Http1Client(read_timeout_s=5, max_connections_per_origin=2)
        replies = await asyncio.gather(*(client.get(f"{server.url}/t{i}") for i in range(6)))
        assert [r.content for r in replies] == [b"ok"] * 6 and most <= 2 and server.connections <= 2
        await client.aclose()
