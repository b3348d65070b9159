"""The race in Beam's timed data-plane flush, without a pipeline (docs/stress.md):

    python benchmarks/flush_race.py --flush_ms 1000 --seconds 5 --switch_interval 0.00001

One thread encodes elements into a `TimeBasedBufferingClosableOutputStream` (what the
FnApiRunner's in-process workers and its own side of the gRPC data plane write through) while
the stream's flusher thread sends the buffer every --flush_ms, as the data channel does (a
protobuf message put on a queue), and a third thread keeps the interpreter busy, as the other
worker does. At the end it decodes everything sent and prints how many elements never arrived.
A small --switch_interval makes threads preempt each other often, so the rare interleaving
(the flusher preempted between copying the buffer and emptying it) shows within seconds.
`--flush_ms 0` is the stream the build uses instead: size-based, flushed by the writer alone.
"""
from __future__ import annotations

import argparse
import queue
import sys
import threading
import time


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(prog="benchmarks/flush_race.py", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--flush_ms", type=int, default=1000,
                        help="Beam's timed flush period (its default: 1000); 0 = no timed flush.")
    parser.add_argument("--seconds", type=float, default=5.0)
    parser.add_argument("--switch_interval", type=float, default=None,
                        help="sys.setswitchinterval (Python's default: 0.005).")
    args = parser.parse_args(argv)
    if args.switch_interval:
        sys.setswitchinterval(args.switch_interval)

    from apache_beam.coders import coders
    from apache_beam.coders.coder_impl import create_InputStream
    from apache_beam.portability.api import beam_fn_api_pb2
    from apache_beam.runners.worker.data_plane import ClosableOutputStream

    coder = coders.FastPrimitivesCoder().get_impl()
    sent: queue.Queue = queue.Queue()

    def send(data: bytes) -> None:  # as _GrpcDataChannel.output_stream's callbacks do
        if data:
            sent.put(beam_fn_api_pb2.Elements.Data(instruction_id="bundle", transform_id="t",
                                                   data=data))

    stop = threading.Event()

    def other_worker():
        while not stop.is_set():
            sum(range(1000))

    threading.Thread(target=other_worker, daemon=True).start()
    stream = ClosableOutputStream.create(send, send, args.flush_ms)
    written, end = 0, time.time() + args.seconds
    while time.time() < end:
        for _ in range(100):
            coder.encode_to_stream({"kind": "count", "n": written, "what": "raw_items"}, stream,
                                   True)
            stream.maybe_flush()
            written += 1
    stream.close()
    stop.set()
    received = 0
    while not sent.empty():
        data = create_InputStream(sent.get().data)
        while data.size() > 0:
            coder.decode_from_stream(data, True)
            received += 1
    print(f"{type(stream).__name__}, timed flush every {args.flush_ms} ms, switch interval "
          f"{sys.getswitchinterval()} s: {written} elements written, {received} received, "
          f"{written - received} lost")
    return 1 if received != written else 0


if __name__ == "__main__":
    sys.exit(main())
