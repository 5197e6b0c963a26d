package podget

import (
	"bufio"
	"bytes"
	"io"
	"net/http"
	"testing"
)

// FuzzReadResponse: no answer panics the reader or makes it hold more
// than it was sent (nor more than maxBody); what it accepts has a three
// digit status. And any response net/http writes (Content-Length,
// chunked, or to EOF) reads back as the status and body written.
func FuzzReadResponse(f *testing.F) {
	for _, s := range []string{
		"HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\n{}",
		"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n3\r\n{\"a\r\n3;ext=1\r\n\":1\r\n1\r\n}\r\n0\r\n\r\n",
		"HTTP/1.0 404 Not Found\r\n\r\nnope",
		"SSH-2.0-OpenSSH\r\n",
		"HTTP/1.1 200 OK\r\nContent-Length: -1\r\n\r\n",
		"HTTP/1.1 200 OK\r\nContent-Length: 99999999999\r\n\r\n",
		"HTTP/1.1 200 OK\r\nContent-Length: 10\r\n\r\n{}",
		"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\nzz\r\n",
		"HTTP/1.1 200 OK\r\nContent-",
		"HTTP/1.1 -1 X\r\n\r\n",
	} {
		f.Add([]byte(s), uint16(200), []byte(`{"kind":"Pod"}`), uint8(0))
	}
	f.Add([]byte{}, uint16(404), []byte(`{"kind":"Status","code":404}`), uint8(1))
	f.Add([]byte{}, uint16(500), []byte("x"), uint8(2))
	f.Fuzz(func(t *testing.T, raw []byte, code uint16, body []byte, mode uint8) {
		c, b, err := readResponse(bufio.NewReader(bytes.NewReader(raw)))
		switch {
		case err != nil && (c != 0 || b != nil):
			t.Fatalf("error %v with status %d and %d bytes", err, c, len(b))
		case err == nil && (c < 100 || c > 999):
			t.Fatalf("accepted status %d", c)
		case len(b) > len(raw) || len(b) > maxBody:
			t.Fatalf("body of %d bytes from %d sent", len(b), len(raw))
		}

		// round trip through net/http's writer
		code = 200 + code%400
		if code == 204 || code == 304 {
			code = 200 // no body allowed
		}
		resp := &http.Response{StatusCode: int(code), ProtoMajor: 1, ProtoMinor: 1,
			Body: io.NopCloser(bytes.NewReader(body)), Close: true, Header: http.Header{}}
		switch mode % 3 {
		case 0:
			resp.ContentLength = int64(len(body))
		case 1:
			resp.ContentLength, resp.TransferEncoding = -1, []string{"chunked"}
		case 2:
			resp.ContentLength = -1
		}
		var wire bytes.Buffer
		if err := resp.Write(&wire); err != nil {
			t.Fatal(err)
		}
		c, b, err = readResponse(bufio.NewReader(&wire))
		if err != nil || c != int(code) || !bytes.Equal(b, body) {
			t.Fatalf("mode %d: wrote %d %q, read %d %q %v", mode%3, code, body, c, b, err)
		}
	})
}
