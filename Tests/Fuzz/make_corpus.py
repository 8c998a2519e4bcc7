#!/usr/bin/env python3
"""Writes the protocol fuzzer's seed corpus from the golden fixtures (see Sources/askrelay-fuzz/FuzzTarget.swift
for the input layout). Usage: make_corpus.py FIXTURES_DIR OUT_DIR"""
import os, struct, sys, uuid

KINDS = ["ask", "ask.result", "send", "cancel", "question", "answer", "response", "closed", "approval",
         "limits.query", "limits.reply", "limits.admin", "echo"]
SIGNATURE = b"ASK\x02"

def frames(parts):
    out = bytes([0])
    for part in parts:
        out += struct.pack("<H", len(part)) + part
    return out

def lead(command, rest=b""):
    """A lead frame: the signature, the command byte, then the command's fixed fields."""
    return SIGNATURE + bytes([command]) + rest

def header(msg_id, subject, sender, recipient, kind, trace=None):
    """The packed SEND/DELIVER header: id, flags (bit 0: subject, bit 1: trace context), [subject], [trace context],
    then from, to, kind after a length byte."""
    flags = (0 if subject is None else 1) | (0 if trace is None else 2)
    out = msg_id + bytes([flags]) + (subject or b"") + (trace or b"")
    for field in (sender, recipient, kind):
        out += bytes([len(field)]) + field
    return out

def main(fixtures, out):
    os.makedirs(out, exist_ok=True)
    written = 0
    for name in sorted(os.listdir(fixtures)):
        if not name.endswith(".json") or name.startswith("askerror"):
            continue
        body = open(os.path.join(fixtures, name), "rb").read()
        stem = name[:-5]
        kind = next((k for k in sorted(KINDS, key=len, reverse=True) if stem == k or stem.startswith(k + ".")), None)
        if kind is None:
            continue
        index = KINDS.index(kind)
        open(os.path.join(out, f"json-{stem}"), "wb").write(bytes([1, index]) + body)
        msg_id = uuid.UUID(int=index + 1).bytes
        send = [lead(4, header(msg_id, None, b"child/c1", b"limits", kind.encode())), body]
        open(os.path.join(out, f"send-{stem}"), "wb").write(frames(send))
        open(os.path.join(out, f"router-{stem}"), "wb").write(frames([b"\x00\x80\x00\x00\x01"] + send))
        written += 3
    hello = b'{"endpoints":[{"address":"child/c1","family":"f1"}],"role":"child","version":2,"worker":"w"}'
    open(os.path.join(out, "hello"), "wb").write(frames([lead(1), hello]))
    open(os.path.join(out, "hello-json"), "wb").write(bytes([1, len(KINDS)]) + hello)
    open(os.path.join(out, "ack"), "wb").write(frames([lead(6, uuid.UUID(int=5).bytes * 3)]))
    open(os.path.join(out, "nack"), "wb").write(frames([lead(7, uuid.UUID(int=6).bytes), b"busy", b"retry later"]))
    open(os.path.join(out, "bye"), "wb").write(frames([lead(8), b"bye"]))
    open(os.path.join(out, "heartbeat"), "wb").write(frames([lead(3)]))
    subject = uuid.UUID("6f1c4a3e-2b7d-4e59-9a0c-1d2e3f405162").bytes
    question = header(uuid.UUID(int=99).bytes, subject, b"broker", b"guardian/g1", b"question")
    open(os.path.join(out, "deliver-subject"), "wb").write(frames([lead(5, question), b"{}"]))
    # SEND and DELIVER carrying ACK ids (after the kind, in the lead frame).
    acks = uuid.UUID(int=7).bytes + uuid.UUID(int=8).bytes
    echo = [lead(4, header(uuid.UUID(int=100).bytes, None, b"echo/e1", b"client/c1", b"echo") + acks), b"hi"]
    open(os.path.join(out, "send-carried-acks"), "wb").write(frames(echo))
    open(os.path.join(out, "deliver-carried-acks"), "wb").write(frames([lead(5, question + acks[:16]), b"{}"]))
    # A SEND with a trace context (W3C traceparent: trace id, parent span id, flags).
    trace = uuid.UUID(int=0x4bf92f3577b34da6a3ce929d0e0e4736).bytes + bytes.fromhex("00f067aa0ba902b7") + b"\x01"
    traced = header(uuid.UUID(int=101).bytes, subject, b"child/c1", b"broker", b"cancel", trace)
    open(os.path.join(out, "send-traced"), "wb").write(frames([lead(4, traced), b"{}"]))
    print(f"wrote {written + 10} corpus files to {out}")

if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2])
