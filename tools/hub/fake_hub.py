"""A fake Hugging Face Hub on loopback (Python standard library only), with
the same behaviour as the C++ tests' fake (src/hub/fake_hub_test_util.h): the
API listing (/api/models/ORG/REPO/revision/REV), resolve URLs that answer with
X-Repo-Commit, ETag / X-Linked-Etag and X-Linked-Size, LFS files redirected to
a second server reached under another host name (localhost), byte ranges.

Used by record_hf_cache_layout.py to let the real huggingface_hub download
from it, and runnable on its own to try `rowlm pull` by hand:

    python3 tools/hub/fake_hub.py models/rowlm-tiny-draft acme/draft
    HF_ENDPOINT=http://127.0.0.1:PORT build/rowlm pull acme/draft
"""

import hashlib
import http.server
import json
import os
import re
import sys
import threading
import urllib.parse


def git_blob_id(content: bytes) -> str:
    return hashlib.sha1(b"blob %d\0" % len(content) + content).hexdigest()


class Repo:
    def __init__(self, repo_id, commit, files, refs=None):
        self.id = repo_id
        self.commit = commit
        self.files = files  # path -> (content bytes, is_lfs)
        self.refs = dict(refs or {})
        self.refs.setdefault("main", commit)

    def blob_name(self, path):
        content, lfs = self.files[path]
        return hashlib.sha256(content).hexdigest() if lfs else git_blob_id(content)


class FakeHub:
    def __init__(self, repos):
        self.repos = {r.id: r for r in repos}
        self.hits = []
        self._lock = threading.Lock()
        hub = self

        class Handler(http.server.BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, *args):
                pass

            def do_HEAD(self):
                hub._handle(self, head=True)

            def do_GET(self):
                hub._handle(self, head=False)

        self.api = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.blobs = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        for server in (self.api, self.blobs):
            threading.Thread(target=server.serve_forever, daemon=True).start()

    @property
    def endpoint(self):
        return "http://127.0.0.1:%d" % self.api.server_address[1]

    @property
    def blob_host(self):
        return "localhost:%d" % self.blobs.server_address[1]

    def close(self):
        for server in (self.api, self.blobs):
            server.shutdown()
            server.server_close()

    def _reply(self, h, status, headers, body=b"", head=False):
        h.send_response(status)
        for k, v in headers.items():
            h.send_header(k, v)
        h.send_header("Content-Length", str(len(body)))
        h.end_headers()
        if not head:
            h.wfile.write(body)

    def _handle(self, h, head):
        url = urllib.parse.urlsplit(h.path)
        path = urllib.parse.unquote(url.path)
        with self._lock:
            self.hits.append((h.command, h.headers.get("Host"), path, h.headers.get("Range")))
        m = re.fullmatch(r"/api/models/([^/]+/[^/]+)/revision/(.+)", path)
        if m:
            return self._listing(h, m.group(1), m.group(2), head)
        m = re.fullmatch(r"/api/models/([^/]+/[^/]+)/tree/([^/]+)", path)
        if m:
            return self._tree(h, m.group(1), m.group(2), head)
        m = re.fullmatch(r"/([^/]+/[^/]+)/resolve/([^/]+)/(.+)", path)
        if m:
            return self._resolve(h, m.group(1), m.group(2), m.group(3), head)
        m = re.fullmatch(r"/blobs/([0-9a-f]+)", path)
        if m:
            return self._blob(h, m.group(1), head)
        self._reply(h, 404, {}, b"not found", head)

    def _listing(self, h, repo_id, rev, head):
        repo = self.repos.get(repo_id)
        if repo is None:
            return self._reply(h, 401, {"X-Error-Message": "Repository not found"}, b"{}", head)
        commit = repo.refs.get(rev, rev if rev == repo.commit else None)
        if commit is None:
            return self._reply(h, 404, {"X-Error-Message": "Invalid rev id: " + rev}, b"{}", head)
        siblings = []
        for p, (content, lfs) in sorted(repo.files.items()):
            pointer = b"p" * 130
            s = {"rfilename": p, "blobId": git_blob_id(pointer if lfs else content),
                 "size": len(pointer) if lfs else len(content)}
            if lfs:
                s["lfs"] = {"sha256": hashlib.sha256(content).hexdigest(), "size": len(content), "pointerSize": 130}
            siblings.append(s)
        body = json.dumps({"id": repo_id, "modelId": repo_id, "sha": commit, "private": False, "gated": False,
                           "siblings": siblings}).encode()
        self._reply(h, 200, {"Content-Type": "application/json"}, body, head)

    def _tree(self, h, repo_id, rev, head):
        """The repo tree listing (GET /api/models/ORG/REPO/tree/REV?recursive=...), one page: newer
        huggingface_hub releases list the files this way in snapshot_download. The repos are flat."""
        repo = self.repos.get(repo_id)
        if repo is None:
            return self._reply(h, 401, {"X-Error-Message": "Repository not found"}, b"[]", head)
        commit = repo.refs.get(rev, rev if rev == repo.commit else None)
        if commit is None:
            return self._reply(h, 404, {"X-Error-Message": "Invalid rev id: " + rev}, b"[]", head)
        entries = []
        for p, (content, lfs) in sorted(repo.files.items()):
            pointer = b"p" * 130
            e = {"type": "file", "path": p, "oid": git_blob_id(pointer if lfs else content),
                 "size": len(content)}
            if lfs:
                e["lfs"] = {"oid": hashlib.sha256(content).hexdigest(), "size": len(content), "pointerSize": 130}
            entries.append(e)
        self._reply(h, 200, {"Content-Type": "application/json"}, json.dumps(entries).encode(), head)

    def _resolve(self, h, repo_id, rev, file_path, head):
        repo = self.repos.get(repo_id)
        if repo is None:
            return self._reply(h, 401, {"X-Error-Message": "Repository not found"}, b"", head)
        commit = repo.refs.get(rev, rev if rev == repo.commit else None)
        if commit is None or file_path not in repo.files:
            return self._reply(h, 404, {"X-Error-Code": "EntryNotFound"}, b"", head)
        content, lfs = repo.files[file_path]
        name = repo.blob_name(file_path)
        if lfs:
            return self._reply(h, 302, {"Location": "http://%s/blobs/%s" % (self.blob_host, name),
                                        "X-Repo-Commit": commit, "X-Linked-Etag": '"%s"' % name,
                                        "X-Linked-Size": str(len(content)), "ETag": '"%s"' % git_blob_id(b"p" * 130)},
                               b"", head)
        self._reply(h, 200, {"X-Repo-Commit": commit, "ETag": '"%s"' % name,
                             "Content-Type": "application/octet-stream"}, content, head)

    def _blob(self, h, name, head):
        for repo in self.repos.values():
            for p, (content, lfs) in repo.files.items():
                if lfs and repo.blob_name(p) == name:
                    rng = h.headers.get("Range")
                    m = re.fullmatch(r"bytes=(\d+)-", rng or "")
                    if m:
                        start = int(m.group(1))
                        if start >= len(content):
                            return self._reply(h, 416, {"Content-Range": "bytes */%d" % len(content)}, b"", head)
                        return self._reply(h, 206, {"Content-Range": "bytes %d-%d/%d" % (start, len(content) - 1,
                                                                                         len(content))},
                                           content[start:], head)
                    return self._reply(h, 200, {"Content-Type": "application/octet-stream"}, content, head)
        self._reply(h, 404, {}, b"", head)


def repo_from_dir(directory, repo_id, commit="1" * 40):
    files = {}
    for name in sorted(os.listdir(directory)):
        with open(os.path.join(directory, name), "rb") as f:
            files[name] = (f.read(), name.endswith((".safetensors", ".gguf")))
    return Repo(repo_id, commit, files)


if __name__ == "__main__":
    if len(sys.argv) != 3:
        sys.exit("usage: fake_hub.py MODEL_DIR ORG/REPO")
    hub = FakeHub([repo_from_dir(sys.argv[1], sys.argv[2])])
    print(hub.endpoint, flush=True)
    try:
        threading.Event().wait()
    except KeyboardInterrupt:
        hub.close()
