package testenv

import (
	"fmt"
	"strings"
)

// FirstDiff shows the first line where two texts differ, quoted so that
// white space shows: "line N:\n- <a's line>\n+ <b's line>". Callers say
// which text is which. Where one text has more lines (a trailing newline
// too), the other's side of the first extra line is "". Equal texts give
// "no line differs".
func FirstDiff(a, b string) string {
	al, bl := strings.Split(a, "\n"), strings.Split(b, "\n")
	for i := 0; i < len(al) || i < len(bl); i++ {
		var x, y string
		if i < len(al) {
			x = al[i]
		}
		if i < len(bl) {
			y = bl[i]
		}
		if x != y || (i < len(al)) != (i < len(bl)) {
			return fmt.Sprintf("line %d:\n- %q\n+ %q", i+1, x, y)
		}
	}
	return "no line differs"
}
