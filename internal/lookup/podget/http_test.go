package podget

import (
	"bufio"
	"strings"
	"testing"
)

func TestReadResponse(t *testing.T) {
	for _, tc := range []struct {
		name, in string
		code     int
		body     string
		err      string
	}{
		{"length", "HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\n{}", 200, "{}", ""},
		{"chunked", "HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n3\r\n{\"a\r\n3;ext=1\r\n\":1\r\n1\r\n}\r\n0\r\n\r\n", 200, `{"a":1}`, ""},
		{"to EOF", "HTTP/1.0 404 Not Found\r\n\r\nnope", 404, "nope", ""},
		{"not HTTP", "SSH-2.0-OpenSSH\r\n", 0, "", "not an HTTP/1 answer"},
		{"bad length", "HTTP/1.1 200 OK\r\nContent-Length: -1\r\n\r\n", 0, "", "bad Content-Length"},
		{"same length twice", "HTTP/1.1 200 OK\r\nContent-Length: 2\r\nContent-Length: 2\r\n\r\n{}", 200, "{}", ""},
		{"conflicting lengths", "HTTP/1.1 200 OK\r\nContent-Length: 2\r\nContent-Length: 0\r\n\r\n{}", 0, "", "conflicting Content-Length"},
		{"endless body to EOF", "HTTP/1.0 200 OK\r\n\r\n" + strings.Repeat("x", maxBody+1), 0, "", "too large"},
		{"body to EOF at the cap", "HTTP/1.0 200 OK\r\n\r\n" + strings.Repeat("x", maxBody), 200, strings.Repeat("x", maxBody), ""},
		{"huge length", "HTTP/1.1 200 OK\r\nContent-Length: 99999999999\r\n\r\n", 0, "", "too large"},
		{"short body", "HTTP/1.1 200 OK\r\nContent-Length: 10\r\n\r\n{}", 0, "", "read body"},
		{"bad chunk", "HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\nzz\r\n", 0, "", "bad chunk size"},
		{"cut headers", "HTTP/1.1 200 OK\r\nContent-", 0, "", "read headers"},
		{"negative status", "HTTP/1.1 -1 X\r\n\r\n", 0, "", "not an HTTP/1 answer"},
		{"signed status", "HTTP/1.1 +20 X\r\n\r\n", 0, "", "not an HTTP/1 answer"},
		{"endless status line", "HTTP/1.1 200 " + strings.Repeat("x", maxHead), 0, "", "head longer than"},
		{"endless headers", "HTTP/1.1 200 OK\r\n" + strings.Repeat("X: y\r\n", maxHead/5), 0, "", "head longer than"},
		{"endless chunk line", "HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n1;" + strings.Repeat("x", maxHead), 0, "", "head longer than"},
		{"head at the cap", "HTTP/1.1 200 OK\r\nX: " + strings.Repeat("y", maxHead-len("HTTP/1.1 200 OK\r\nX: \r\n\r\n")) + "\r\n\r\n", 200, "", ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			code, body, err := readResponse(bufio.NewReader(strings.NewReader(tc.in)))
			if tc.err != "" {
				if err == nil || !strings.Contains(err.Error(), tc.err) {
					t.Fatalf("got %v, want error %q", err, tc.err)
				}
				return
			}
			if err != nil || code != tc.code || string(body) != tc.body {
				t.Errorf("got %d %q %v, want %d %q", code, body, err, tc.code, tc.body)
			}
		})
	}
}
