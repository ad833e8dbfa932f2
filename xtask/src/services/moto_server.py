# moto_server with atomic writes, started by `cargo xtask` (xtask/src/services/s3.rs writes this
# file into moto's virtualenv with a shebang naming the virtualenv's python).
#
# moto 5.2.5 checks `If-Match` / `If-None-Match` in put_object and stores the object later, with no
# lock, and moto_server runs werkzeug with threaded=True: two racing PUTs with the same `If-Match`
# can both pass the check, and one head swap is lost. Real S3 decides a conditional write
# atomically. So every write (PUT, POST, DELETE) runs under one lock, with its response read out
# inside it; reads stay concurrent. A lock around conditional requests alone is not enough: an
# unconditional write landing between a conditional write's check and its store would be lost.
import sys
import threading

from moto import server

_LOCK = threading.Lock()
_WRITES = frozenset(("PUT", "POST", "DELETE"))


class SerializedWrites(server.DomainDispatcherApplication):
    def __call__(self, environ, start_response):
        if environ.get("REQUEST_METHOD") not in _WRITES:
            return super().__call__(environ, start_response)
        with _LOCK:
            body = super().__call__(environ, start_response)
            try:
                return list(body)
            finally:
                if hasattr(body, "close"):
                    body.close()


# main() looks the class up in its module when it runs.
server.DomainDispatcherApplication = SerializedWrites

if __name__ == "__main__":
    sys.exit(server.main())
