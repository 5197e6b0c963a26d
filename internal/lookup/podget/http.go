package podget

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"strconv"
	"strings"
	"time"
)

// The plugin and its helper do exactly one kind of HTTP request: a GET with
// "Connection: close". This small HTTP/1.1 client does that one thing and
// keeps net/http (over a megabyte) out of binaries the runtime execs for
// every pod.

// ErrNotFound: the source answered 404, it does not know the pod.
var ErrNotFound = errors.New("pod not found")

// GetOK is Get that only accepts a 200; a 404 is ErrNotFound.
func GetOK(ctx context.Context, conn net.Conn, host, path string, header map[string]string) ([]byte, error) {
	code, body, err := Get(ctx, conn, host, path, header)
	switch {
	case err != nil:
		return nil, err
	case code == 404:
		return nil, ErrNotFound
	case code != 200:
		return nil, fmt.Errorf("GET %s: HTTP %d: %s", path, code, Trim(body))
	}
	return body, nil
}

// maxBody caps what we read: a pod object is a few kB, never megabytes.
const maxBody = 4 << 20

// Get sends one GET on conn, closes conn, and returns the status code and
// body. ctx's deadline bounds the whole exchange.
func Get(ctx context.Context, conn net.Conn, host, path string, header map[string]string) (int, []byte, error) {
	defer conn.Close()
	if dl, ok := ctx.Deadline(); ok {
		_ = conn.SetDeadline(dl)
	}
	stop := context.AfterFunc(ctx, func() { _ = conn.SetDeadline(time.Unix(1, 0)) })
	defer stop()

	var req strings.Builder
	fmt.Fprintf(&req, "GET %s HTTP/1.1\r\nHost: %s\r\nAccept: application/json\r\nUser-Agent: mesh-cni\r\nConnection: close\r\n", path, host)
	for k, v := range header {
		fmt.Fprintf(&req, "%s: %s\r\n", k, v)
	}
	req.WriteString("\r\n")
	if _, err := io.WriteString(conn, req.String()); err != nil {
		return 0, nil, ctxErr(ctx, err)
	}
	code, body, err := readResponse(bufio.NewReader(conn))
	return code, body, ctxErr(ctx, err)
}

func ctxErr(ctx context.Context, err error) error {
	if err != nil && ctx.Err() != nil {
		return fmt.Errorf("%w (%v)", ctx.Err(), err) //nolint:errorlint // the second error is context, not a cause to match
	}
	return err
}

// maxHead caps the status line and headers together, and each chunk-size
// line: an answer that never ends its head is an error, not memory spent.
const maxHead = 1 << 20

var errHeadTooLarge = fmt.Errorf("answer head longer than %d bytes", maxHead)

// readLine reads up to and including '\n', counting what it reads against
// *left.
func readLine(r *bufio.Reader, left *int) (string, error) {
	var line []byte
	for {
		frag, err := r.ReadSlice('\n')
		if len(frag) > *left {
			return "", errHeadTooLarge
		}
		*left -= len(frag)
		line = append(line, frag...)
		if !errors.Is(err, bufio.ErrBufferFull) {
			return string(line), err
		}
	}
}

func readResponse(r *bufio.Reader) (int, []byte, error) {
	left := maxHead
	status, err := readLine(r, &left)
	if err != nil {
		return 0, nil, fmt.Errorf("read status line: %w", err)
	}
	// "HTTP/1.1 200 OK": the status is three digits (RFC 9110, 15)
	proto, rest, _ := strings.Cut(strings.TrimSpace(status), " ")
	codeStr, _, _ := strings.Cut(rest, " ")
	code, err := strconv.Atoi(codeStr)
	if !strings.HasPrefix(proto, "HTTP/1.") || err != nil || len(codeStr) != 3 || code < 100 {
		return 0, nil, fmt.Errorf("not an HTTP/1 answer: %q", Trim([]byte(status)))
	}
	length, chunked := int64(-1), false
	for {
		line, err := readLine(r, &left)
		if err != nil {
			return 0, nil, fmt.Errorf("read headers: %w", err)
		}
		line = strings.TrimRight(line, "\r\n")
		if line == "" {
			break
		}
		k, v, _ := strings.Cut(line, ":")
		v = strings.TrimSpace(v)
		switch strings.ToLower(k) {
		case "content-length":
			n, err := strconv.ParseInt(v, 10, 64)
			if err != nil || n < 0 {
				return 0, nil, fmt.Errorf("bad Content-Length %q", v)
			}
			// Two different lengths: which one frames the body is anyone's
			// guess, so the answer is refused (RFC 9112, 6.3).
			if length >= 0 && n != length {
				return 0, nil, fmt.Errorf("conflicting Content-Length %d and %d", length, n)
			}
			length = n
		case "transfer-encoding":
			chunked = strings.EqualFold(v, "chunked")
		}
	}
	var body []byte
	switch {
	case chunked:
		body, err = readChunked(r)
	case length >= 0:
		if length > maxBody {
			return 0, nil, fmt.Errorf("answer of %d bytes is too large", length)
		}
		body = make([]byte, length)
		_, err = io.ReadFull(r, body)
	default:
		// Read one byte past the cap, so a longer answer is refused rather
		// than cut short into something that might still parse.
		body, err = io.ReadAll(io.LimitReader(r, maxBody+1))
		if err == nil && len(body) > maxBody {
			return 0, nil, fmt.Errorf("answer longer than %d bytes is too large", maxBody)
		}
	}
	if err != nil {
		return 0, nil, fmt.Errorf("read body: %w", err)
	}
	return code, body, nil
}

func readChunked(r *bufio.Reader) ([]byte, error) {
	var body []byte
	for {
		left := maxHead
		line, err := readLine(r, &left)
		if err != nil {
			return nil, err
		}
		sizeStr, _, _ := strings.Cut(strings.TrimSpace(line), ";")
		size, err := strconv.ParseInt(sizeStr, 16, 64)
		if err != nil || size < 0 {
			return nil, fmt.Errorf("bad chunk size %q", line)
		}
		if size == 0 {
			return body, nil // trailers, if any, are not needed
		}
		if int64(len(body))+size > maxBody {
			return nil, errors.New("answer too large")
		}
		chunk := make([]byte, size+2) // data + CRLF
		if _, err := io.ReadFull(r, chunk); err != nil {
			return nil, err
		}
		body = append(body, chunk[:size]...)
	}
}

// Trim cuts b to 200 bytes for an error message.
func Trim(b []byte) string {
	if len(b) > 200 {
		b = b[:200]
	}
	return string(b)
}
