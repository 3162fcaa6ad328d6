package refusals

import (
	"context"
	"encoding/json"
	"errors"
	"io"
	"mime"
	"net/http"
	"strings"
	"unicode"

	spb "google.golang.org/genproto/googleapis/rpc/status"
	"google.golang.org/protobuf/proto"
)

// maxCapturedBody bounds the bytes of a refusal's response body kept for the log.
const maxCapturedBody = 1024

// wrapHTTP counts and logs the refusals of the HTTP handler next. confighttp runs middlewares
// after its own decompression, size limit and authentication, so it sees what the OTLP
// receiver answers: wrong method or path, content type, a body that does not decode or is
// cut off at the size limit, pushback.
func (e *Extension) wrapHTTP(_ context.Context, next http.Handler) (http.Handler, error) {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		rec := &recorder{ResponseWriter: w}
		var body *bodyReader
		if r.Body != nil && r.Body != http.NoBody {
			body = &bodyReader{ReadCloser: r.Body}
			r.Body = body
		}
		next.ServeHTTP(rec, r)
		if rec.code < http.StatusBadRequest {
			return
		}
		var readErr error
		if body != nil {
			readErr = body.err
		}
		msg := rec.message()
		if readErr != nil {
			msg = readErr.Error()
		}
		e.tracker.refused(HTTP, classifyHTTP(rec.code, readErr), r.RemoteAddr, msg)
	}), nil
}

// classifyHTTP names the reason of a response with an error status. readErr is the error
// reading the request body met, if any.
func classifyHTTP(code int, readErr error) Reason {
	switch code {
	case http.StatusBadRequest:
		var tooLarge *http.MaxBytesError
		switch {
		case readErr == nil:
			// The body was read whole, so the receiver refused what it holds.
			return Undecodable
		case errors.As(readErr, &tooLarge):
			return TooLarge
		case errors.Is(readErr, io.ErrUnexpectedEOF):
			// The sender's connection ended inside the body.
			return Other
		}
		// The body did not decompress (confighttp decompresses it as the receiver reads it).
		return BadEncoding
	case http.StatusUnauthorized, http.StatusForbidden:
		return Unauthenticated
	case http.StatusNotFound, http.StatusMethodNotAllowed:
		return BadMethodOrPath
	case http.StatusRequestEntityTooLarge:
		return TooLarge
	case http.StatusUnsupportedMediaType:
		return BadContentType
	case http.StatusTooManyRequests, http.StatusServiceUnavailable:
		return Pushback
	}
	return Other
}

// bodyReader remembers the first error other than io.EOF that reading the body met.
type bodyReader struct {
	io.ReadCloser
	err error
}

func (b *bodyReader) Read(p []byte) (int, error) {
	n, err := b.ReadCloser.Read(p)
	if err != nil && !errors.Is(err, io.EOF) && b.err == nil {
		b.err = err
	}
	return n, err
}

// recorder keeps the status code and, for an error status, the start of the body.
type recorder struct {
	http.ResponseWriter
	code int
	body []byte
}

func (r *recorder) WriteHeader(code int) {
	if r.code == 0 {
		r.code = code
	}
	r.ResponseWriter.WriteHeader(code)
}

func (r *recorder) Write(p []byte) (int, error) {
	if r.code == 0 {
		r.code = http.StatusOK
	}
	if r.code >= http.StatusBadRequest && len(r.body) < maxCapturedBody {
		r.body = append(r.body, p[:min(len(p), maxCapturedBody-len(r.body))]...)
	}
	return r.ResponseWriter.Write(p)
}

// Unwrap lets http.ResponseController reach the connection's writer.
func (r *recorder) Unwrap() http.ResponseWriter { return r.ResponseWriter }

// message is what the response told the sender: the message of the OTLP status the receiver
// writes (protobuf or JSON), or the plain text of other errors.
func (r *recorder) message() string {
	ct, _, _ := mime.ParseMediaType(r.Header().Get("Content-Type"))
	switch ct {
	case "application/x-protobuf":
		var s spb.Status
		if proto.Unmarshal(r.body, &s) == nil {
			return s.GetMessage()
		}
	case "application/json":
		var s struct {
			Message string `json:"message"`
		}
		if json.Unmarshal(r.body, &s) == nil {
			return s.Message
		}
	}
	return printable(string(r.body))
}

// printable keeps a log field readable whatever a body held.
func printable(s string) string {
	s = strings.TrimSpace(s)
	return strings.Map(func(c rune) rune {
		if unicode.IsPrint(c) {
			return c
		}
		return '?'
	}, s)
}
