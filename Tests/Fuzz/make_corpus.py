#!/usr/bin/env python3
"""Writes the protocol fuzzer's seed corpus from the golden fixtures (see Sources/askrelay-fuzz/FuzzTarget.swift
for the input layout). Usage: make_corpus.py FIXTURES_DIR OUT_DIR"""
import os, struct, sys, uuid

KINDS = ["ask", "ask.result", "send", "cancel", "question", "answer", "response", "closed", "approval",
         "limits.query", "limits.reply", "limits.admin", "echo"]
SIGNATURE = b"ASK\x01"

def frames(parts):
    out = bytes([0])
    for part in parts:
        out += struct.pack("<H", len(part)) + part
    return out

def header(msg_id, subject, sender, recipient, kind):
    """The packed SEND/DELIVER header: id, flags (bit 0: subject), [subject], then from, to, kind after a length byte."""
    out = msg_id + bytes([0 if subject is None else 1]) + (subject or b"")
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
        send = [SIGNATURE, bytes([4]), header(msg_id, None, b"child/c1", b"limits", kind.encode()), body]
        open(os.path.join(out, f"send-{stem}"), "wb").write(frames(send))
        open(os.path.join(out, f"router-{stem}"), "wb").write(frames([b"\x00\x80\x00\x00\x01"] + send))
        written += 3
    hello = b'{"endpoints":[{"address":"child/c1","family":"f1"}],"role":"child","version":1,"worker":"w"}'
    open(os.path.join(out, "hello"), "wb").write(frames([SIGNATURE, bytes([1]), hello]))
    open(os.path.join(out, "hello-json"), "wb").write(bytes([1, len(KINDS)]) + hello)
    open(os.path.join(out, "ack"), "wb").write(frames([SIGNATURE, bytes([6]), uuid.uuid4().bytes * 3]))
    open(os.path.join(out, "nack"), "wb").write(frames([SIGNATURE, bytes([7]), uuid.uuid4().bytes, b"busy", b"retry later"]))
    open(os.path.join(out, "bye"), "wb").write(frames([SIGNATURE, bytes([8]), b"bye"]))
    open(os.path.join(out, "heartbeat"), "wb").write(frames([SIGNATURE, bytes([3])]))
    subject = uuid.UUID("6f1c4a3e-2b7d-4e59-9a0c-1d2e3f405162").bytes
    deliver = [SIGNATURE, bytes([5]), header(uuid.UUID(int=99).bytes, subject, b"broker", b"guardian/g1", b"question"), b"{}"]
    open(os.path.join(out, "deliver-subject"), "wb").write(frames(deliver))
    # SEND and DELIVER carrying ACK ids (the optional frame before the body).
    acks = uuid.UUID(int=7).bytes + uuid.UUID(int=8).bytes
    echo = [SIGNATURE, bytes([4]), header(uuid.UUID(int=100).bytes, None, b"echo/e1", b"client/c1", b"echo"), acks, b"hi"]
    open(os.path.join(out, "send-carried-acks"), "wb").write(frames(echo))
    carried = [SIGNATURE, bytes([5]), deliver[2], acks[:16], b"{}"]
    open(os.path.join(out, "deliver-carried-acks"), "wb").write(frames(carried))
    print(f"wrote {written + 9} corpus files to {out}")

if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2])
