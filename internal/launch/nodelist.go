package launch

import (
	"fmt"
	"strconv"
	"strings"
)

// maxHosts bounds the expansion of one node list, so that a typo such as
// n[1-999999999] is an error instead of an exhausted memory.
const maxHosts = 1 << 20

// ExpandNodeList expands Slurm's compressed host list notation, as found in
// SLURM_JOB_NODELIST, into host names in Slurm's order:
//
//	"n1,n2"              -> n1 n2
//	"node[1-3,7]"        -> node1 node2 node3 node7
//	"a[01-03]"           -> a01 a02 a03 (the lower bound's width is kept)
//	"rack[1-2]-node[3-4]" -> rack1-node3 rack1-node4 rack2-node3 rack2-node4
//	"x,y[1-2],z"         -> x y1 y2 z
//
// Malformed lists (empty names, unbalanced or nested brackets, bounds that
// are not decimal numbers, a range whose end precedes its start) are
// errors, as are lists of more than 2^20 hosts.
func ExpandNodeList(s string) ([]string, error) {
	items, err := splitTop(s)
	if err != nil {
		return nil, fmt.Errorf("launch: node list %q: %w", s, err)
	}
	var out []string
	for _, it := range items {
		hosts, err := expandItem(it, maxHosts-len(out))
		if err != nil {
			return nil, fmt.Errorf("launch: node list %q: %w", s, err)
		}
		out = append(out, hosts...)
	}
	return out, nil
}

// splitTop splits s at the commas outside brackets.
func splitTop(s string) ([]string, error) {
	var items []string
	depth, start := 0, 0
	for i := 0; i < len(s); i++ {
		switch s[i] {
		case '[':
			if depth > 0 {
				return nil, fmt.Errorf("nested '[' at offset %d", i)
			}
			depth++
		case ']':
			if depth == 0 {
				return nil, fmt.Errorf("unbalanced ']' at offset %d", i)
			}
			depth--
		case ',':
			if depth == 0 {
				items = append(items, s[start:i])
				start = i + 1
			}
		}
	}
	if depth != 0 {
		return nil, fmt.Errorf("unclosed '['")
	}
	items = append(items, s[start:])
	for _, it := range items {
		if strings.TrimSpace(it) == "" {
			return nil, fmt.Errorf("empty host name")
		}
		if strings.ContainsAny(it, " \t\n") {
			return nil, fmt.Errorf("space in host name %q", it)
		}
	}
	return items, nil
}

// expandItem expands one host pattern such as rack[1-2]-node[3-4].
func expandItem(it string, limit int) ([]string, error) {
	out := []string{""}
	for it != "" {
		open := strings.IndexByte(it, '[')
		if open < 0 {
			for i := range out {
				out[i] += it
			}
			break
		}
		prefix := it[:open]
		end := strings.IndexByte(it, ']') // splitTop checked the balance
		nums, err := expandRanges(it[open+1 : end])
		if err != nil {
			return nil, err
		}
		if len(out)*len(nums) > limit {
			return nil, fmt.Errorf("more than %d hosts", maxHosts)
		}
		next := make([]string, 0, len(out)*len(nums))
		for _, o := range out {
			for _, n := range nums {
				next = append(next, o+prefix+n)
			}
		}
		out = next
		it = it[end+1:]
	}
	if len(out) > limit {
		return nil, fmt.Errorf("more than %d hosts", maxHosts)
	}
	return out, nil
}

// expandRanges expands the inside of brackets: "1-3,7", "01-03".
func expandRanges(s string) ([]string, error) {
	if s == "" {
		return nil, fmt.Errorf("empty brackets")
	}
	var out []string
	for _, r := range strings.Split(s, ",") {
		lo, hi, isRange := strings.Cut(r, "-")
		a, err := parseBound(lo)
		if err != nil {
			return nil, err
		}
		b := a
		if isRange {
			if b, err = parseBound(hi); err != nil {
				return nil, err
			}
		}
		if b < a {
			return nil, fmt.Errorf("range %q ends before it starts", r)
		}
		if b-a >= maxHosts {
			return nil, fmt.Errorf("range %q has more than %d hosts", r, maxHosts)
		}
		width := len(lo)
		for n := a; n <= b; n++ {
			out = append(out, fmt.Sprintf("%0*d", width, n))
		}
	}
	return out, nil
}

func parseBound(s string) (uint64, error) {
	if s == "" {
		return 0, fmt.Errorf("empty number in a range")
	}
	for _, c := range []byte(s) {
		if c < '0' || c > '9' {
			return 0, fmt.Errorf("%q is not a decimal number", s)
		}
	}
	n, err := strconv.ParseUint(s, 10, 63)
	if err != nil {
		return 0, fmt.Errorf("number %q: %w", s, err)
	}
	return n, nil
}
