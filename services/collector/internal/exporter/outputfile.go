package exporter

import (
	"bufio"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"os"
	"sync"
)

// maxRecord bounds one record when reading an output file back.
const maxRecord = 256 << 20

// FileWriter appends each request to a file as a length-delimited
// ExportProfilesServiceRequest (a uvarint byte count, then the protobuf message): the
// standard delimited-protobuf stream, so one file holds every interval and stays readable.
type FileWriter struct {
	mu sync.Mutex
	f  *os.File
}

// NewFileWriter opens (creating or appending to) path.
func NewFileWriter(path string) (*FileWriter, error) {
	f, err := os.OpenFile(path, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return nil, fmt.Errorf("open output file: %w", err)
	}
	return &FileWriter{f: f}, nil
}

// Write appends one encoded request.
func (w *FileWriter) Write(data []byte) error {
	w.mu.Lock()
	defer w.mu.Unlock()
	buf := binary.AppendUvarint(make([]byte, 0, binary.MaxVarintLen64+len(data)), uint64(len(data)))
	buf = append(buf, data...)
	if _, err := w.f.Write(buf); err != nil {
		return fmt.Errorf("write output file %s: %w", w.f.Name(), err)
	}
	return nil
}

// Close closes the file.
func (w *FileWriter) Close() error {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.f.Close()
}

// ReadRecords returns the encoded requests of a file FileWriter wrote.
func ReadRecords(r io.Reader) ([][]byte, error) {
	br := bufio.NewReader(r)
	var out [][]byte
	for {
		n, err := binary.ReadUvarint(br)
		if errors.Is(err, io.EOF) {
			return out, nil
		}
		if err != nil {
			return out, fmt.Errorf("record %d: length: %w", len(out), err)
		}
		if n > maxRecord {
			return out, fmt.Errorf("record %d: length %d exceeds %d", len(out), n, maxRecord)
		}
		rec := make([]byte, n)
		if _, err := io.ReadFull(br, rec); err != nil {
			return out, fmt.Errorf("record %d: truncated: %w", len(out), err)
		}
		out = append(out, rec)
	}
}
