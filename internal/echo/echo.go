// Package echo cuts the values error messages repeat, so a message never
// carries a whole oversized value (a config key, an annotation) into the
// runtime's log, events and the agent's reports.
package echo

import (
	"fmt"
	"unicode/utf8"
)

// Max is how much of a value an error message repeats.
const Max = 256

// Clip cuts s to Max bytes on a rune boundary, marking the cut.
func Clip(s string) string {
	if len(s) <= Max {
		return s
	}
	cut := Max
	for cut > 0 && !utf8.RuneStart(s[cut]) {
		cut--
	}
	return fmt.Sprintf("%s...[%d bytes cut]", s[:cut], len(s)-cut)
}
