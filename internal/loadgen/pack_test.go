package loadgen

import (
	"bytes"
	"encoding/binary"
	"hash/crc32"
	"strings"
	"testing"
)

func TestPackVerifier(t *testing.T) {
	objs, _, err := commitObjects("b", zeroOID, 3000)
	if err != nil {
		t.Fatal(err)
	}
	good, err := buildPack(objs)
	if err != nil {
		t.Fatal(err)
	}
	mutate := func(f func(p []byte) []byte) []byte {
		return f(append([]byte(nil), good...))
	}
	tests := []struct {
		name    string
		pack    []byte
		wantErr string
	}{
		{"good", good, ""},
		{"flipped body byte", mutate(func(p []byte) []byte { p[40] ^= 1; return p }), "checksum mismatch"},
		{"flipped trailer byte", mutate(func(p []byte) []byte { p[len(p)-1] ^= 1; return p }), "checksum mismatch"},
		{"truncated", good[:len(good)-1], "checksum mismatch"},
		{"only header", good[:12], "truncated pack"},
		{"short header", good[:7], "truncated pack header"},
		{"empty", nil, "no pack data"},
		{"bad magic", mutate(func(p []byte) []byte { copy(p, "KCAP"); return p }), "not a pack"},
		{"bad version", mutate(func(p []byte) []byte { binary.BigEndian.PutUint32(p[4:], 4); return p }), "unsupported pack version 4"},
		{"extra byte", append(append([]byte(nil), good...), 0), "checksum mismatch"},
	}
	// The same stream cut into chunks of every awkward size around the
	// 20-byte trailer and the 12-byte header.
	chunkSizes := []int{1, 3, 12, 19, 20, 21, 40, 1 << 20}
	for _, tt := range tests {
		for _, size := range chunkSizes {
			v := newPackVerifier()
			var err error
			for p := tt.pack; len(p) > 0 && err == nil; {
				n := min(size, len(p))
				_, err = v.Write(p[:n])
				p = p[n:]
			}
			if err == nil {
				err = v.finish()
			}
			switch {
			case tt.wantErr == "" && err != nil:
				t.Errorf("%s/%d: %v", tt.name, size, err)
			case tt.wantErr != "" && (err == nil || !strings.Contains(err.Error(), tt.wantErr)):
				t.Errorf("%s/%d: err = %v, want %q", tt.name, size, err, tt.wantErr)
			}
			if tt.wantErr == "" && (v.objects != 3 || v.version != 2 || v.n != int64(len(good))) {
				t.Errorf("%s/%d: objects %d version %d bytes %d", tt.name, size, v.objects, v.version, v.n)
			}
		}
	}
}

func TestCommitObjectsUnique(t *testing.T) {
	seen := map[string]bool{}
	for _, size := range []int{0, 1, 10, 100} {
		objs, id, err := commitObjects("main", zeroOID, size)
		if err != nil {
			t.Fatal(err)
		}
		if seen[id] {
			t.Errorf("size %d: commit %s generated twice", size, id)
		}
		seen[id] = true
		if size > len(objs[2].data) {
			t.Errorf("size %d: blob has %d bytes", size, len(objs[2].data))
		}
	}
}

func TestPackVerifierFingerprintMode(t *testing.T) {
	objs, _, err := commitObjects("b", zeroOID, 3000)
	if err != nil {
		t.Fatal(err)
	}
	good, err := buildPack(objs)
	if err != nil {
		t.Fatal(err)
	}
	body := good[:len(good)-20]
	want := crc32.Checksum(body, castagnoli)
	for _, size := range []int{1, 7, 20, 21, 4096, 1 << 20} {
		for _, withSHA := range []bool{true, false} {
			v := newPackVerifier()
			v.withCRC = true
			if !withSHA {
				v.h = nil
			}
			for p := good; len(p) > 0; {
				n := min(size, len(p))
				if _, err := v.Write(p[:n]); err != nil {
					t.Fatal(err)
				}
				p = p[n:]
			}
			if err := v.finish(); err != nil {
				t.Fatalf("%d/%v: %v", size, withSHA, err)
			}
			if v.crc != want || !bytes.Equal(v.tail[:v.ntail], good[len(good)-20:]) || v.objects != 3 {
				t.Errorf("%d/%v: crc %08x (want %08x), trailer %x, objects %d", size, withSHA, v.crc, want, v.tail[:v.ntail], v.objects)
			}
		}
	}
	// Without SHA-1 the header and length are still checked.
	for _, bad := range [][]byte{good[:30], append([]byte("KCAP"), good[4:]...)} {
		v := newPackVerifier()
		v.h = nil
		_, err := v.Write(bad)
		if err == nil {
			err = v.finish()
		}
		if err == nil {
			t.Errorf("%q…: accepted", bad[:8])
		}
	}
}
