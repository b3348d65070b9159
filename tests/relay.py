"""A TCP relay in front of a local server that cuts every connection, and refuses new ones, once
`budget` bytes have gone through it (the server "dies" mid-transfer), until `revive()`: a store
that fails part way, for the tests of what a remote target leaves behind."""
import socket
import threading


class Relay:
    def __init__(self, target_port: int, budget: int | None = None):
        self.target = ("127.0.0.1", target_port)
        self.budget = budget
        self.sent = 0
        self.dead = False
        self.lock = threading.Lock()
        self.sock = socket.socket()
        self.sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        self.sock.bind(("127.0.0.1", 0))
        self.sock.listen(64)
        self.port = self.sock.getsockname()[1]
        self.conns = []
        threading.Thread(target=self.accept, daemon=True).start()

    def accept(self):
        while True:
            try:
                client, _ = self.sock.accept()
            except OSError:
                return
            if self.dead:
                client.close()
                continue
            try:
                server = socket.create_connection(self.target)
            except OSError:
                client.close()
                continue
            self.conns += [client, server]
            for a, b in ((client, server), (server, client)):
                threading.Thread(target=self.pipe, args=(a, b), daemon=True).start()

    def pipe(self, a, b):
        try:
            while True:
                data = a.recv(65536)
                if not data:
                    break
                with self.lock:
                    self.sent += len(data)
                    if self.budget is not None and self.sent > self.budget:
                        self.kill()
                        return
                b.sendall(data)
        except OSError:
            pass
        finally:
            for s in (a, b):
                try:
                    s.shutdown(socket.SHUT_RDWR)
                except OSError:
                    pass

    def kill(self):
        self.dead = True
        for s in self.conns:
            try:
                s.shutdown(socket.SHUT_RDWR)
                s.close()
            except OSError:
                pass
        self.conns = []

    def revive(self):
        self.dead, self.budget = False, None

    def close(self):
        self.kill()
        self.sock.close()
