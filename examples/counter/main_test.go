package main

import (
	"io"
	"testing"
)

func TestParseFlags(t *testing.T) {
	tests := []struct {
		name    string
		args    []string
		wantErr bool
		stream  string
	}{
		{name: "defaults", args: nil, stream: "INPUT_demo"},
		{name: "group names the stream", args: []string{"--group", "orders"}, stream: "INPUT_orders"},
		{name: "explicit stream", args: []string{"--input-stream", "IN"}, stream: "IN"},
		{name: "dotted group", args: []string{"--group", "a.b"}, wantErr: true},
		{name: "zero batch", args: []string{"--batch", "0"}, wantErr: true},
		{name: "zero delay", args: []string{"--max-delay", "0s"}, wantErr: true},
		{name: "zero poll wait", args: []string{"--poll-wait", "0s"}, wantErr: true},
		{name: "stray argument", args: []string{"extra"}, wantErr: true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c, err := parseFlags(tt.args, io.Discard)
			if (err != nil) != tt.wantErr {
				t.Fatalf("parseFlags(%q) error = %v, want error %v", tt.args, err, tt.wantErr)
			}
			if err == nil && c.inputStream != tt.stream {
				t.Errorf("parseFlags(%q) stream = %q, want %q", tt.args, c.inputStream, tt.stream)
			}
		})
	}
}
