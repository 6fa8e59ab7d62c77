package pktline

import "strings"

// GIT_PROTOCOL, the environment variable (the Git-Protocol HTTP header, the
// SSH env request) by which a client asks for protocol v1 or v2, is parsed
// here and nowhere else: transports validate it, gitcmd refuses an invalid
// one in git's environment, and hosting and the pack cache read its
// version from it.

// maxProtocolLen bounds GIT_PROTOCOL. Real clients send "version=2" (9
// bytes); the cap leaves room for future keys without letting a header
// become an unbounded environment variable.
const maxProtocolLen = 256

// ValidProtocol reports whether s is an acceptable GIT_PROTOCOL value:
// colon-separated key[=value] items (gitprotocol-pack(5)), keys of
// [a-z0-9-], values of [A-Za-z0-9._-].
func ValidProtocol(s string) bool {
	if s == "" || len(s) > maxProtocolLen {
		return false
	}
	for _, item := range strings.Split(s, ":") {
		k, v, hasValue := strings.Cut(item, "=")
		if k == "" || !onlyBytes(k, "abcdefghijklmnopqrstuvwxyz0123456789-") {
			return false
		}
		if hasValue && (v == "" || !onlyBytes(v, "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789._-")) {
			return false
		}
	}
	return true
}

// ProtocolVersion returns the protocol version GIT_PROTOCOL value s asks
// for: 2 or 1 when it holds version=2 or version=1 (the highest wins, as in
// git), else 0. Invalid values mean 0.
func ProtocolVersion(s string) int {
	if !ValidProtocol(s) {
		return 0
	}
	v := 0
	for _, item := range strings.Split(s, ":") {
		switch item {
		case "version=2":
			v = max(v, 2)
		case "version=1":
			v = max(v, 1)
		}
	}
	return v
}

func onlyBytes(s, allowed string) bool {
	for i := 0; i < len(s); i++ {
		if strings.IndexByte(allowed, s[i]) < 0 {
			return false
		}
	}
	return true
}
