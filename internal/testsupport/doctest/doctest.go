// Package doctest reads the shell commands out of the Markdown docs, so a
// test can run or check every one of them and the docs cannot rot. The e2e
// suite uses it too: it runs the blocks tagged `<!-- e2e: NAME -->` against
// its kind cluster.
package doctest

import (
	"bufio"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"sort"
	"strings"
)

// Block is one fenced code block.
type Block struct {
	File string
	Line int    // of the opening fence
	Lang string // "sh", "yaml", ...
	// Tag is the value of an HTML comment right above the fence:
	// `<!-- e2e: NAME -->` gives "e2e: NAME", `<!-- doctest: external -->`
	// (commands of other projects, only parsed) gives "doctest: external".
	Tag  string
	Body string
	// Commands of an sh block, in order.
	Commands []Command
}

// E2E returns the e2e name of a block tagged `<!-- e2e: NAME -->`, or "".
func (b Block) E2E() string {
	if name, ok := strings.CutPrefix(b.Tag, "e2e:"); ok {
		return strings.TrimSpace(name)
	}
	return ""
}

// External reports a block of another project's commands.
func (b Block) External() bool { return b.Tag == "doctest: external" }

// Release reports a block `<!-- doctest: release -->`: commands against a
// published release (cosign, crane, helm pull), run by hack's TestRelease
// against the release it makes, not by the docs' runner.
func (b Block) Release() bool { return b.Tag == "doctest: release" }

// Command is one line of an sh block: a pipeline of simple commands, with
// an optional output redirect and, for a here-document, its text.
type Command struct {
	Line     int
	Text     string
	Pipeline [][]string
	Redirect string // "> FILE"
	Stdin    string // here-document body
}

var (
	fence   = regexp.MustCompile("^```([a-z]*)\\s*$")
	tag     = regexp.MustCompile(`^<!--\s*((?:e2e|doctest):[^>]*?)\s*-->\s*$`)
	heredoc = regexp.MustCompile(`^cat > (\S+) <<'?([A-Z]+)'?$`)
)

// Parse reads every fenced block of a Markdown file.
func Parse(path string) ([]Block, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	var (
		blocks  []Block
		cur     *Block
		body    []string
		lastTag string
		indent  int
	)
	sc := bufio.NewScanner(strings.NewReader(string(data)))
	for n := 1; sc.Scan(); n++ {
		line := sc.Text()
		m := fence.FindStringSubmatch(strings.TrimSpace(line))
		switch {
		case cur == nil && m != nil:
			cur = &Block{File: path, Line: n, Lang: m[1], Tag: lastTag}
			body, indent = nil, len(line)-len(strings.TrimLeft(line, " "))
		case cur != nil && strings.TrimSpace(line) == "```":
			cur.Body = strings.Join(body, "\n")
			if cur.Lang == "sh" {
				cmds, err := ParseCommands(body, cur.Line+1)
				if err != nil {
					return nil, fmt.Errorf("%s:%w", path, err)
				}
				cur.Commands = cmds
			}
			blocks = append(blocks, *cur)
			cur, lastTag = nil, ""
		case cur != nil:
			body = append(body, dedent(line, indent))
		default:
			if t := tag.FindStringSubmatch(strings.TrimSpace(line)); t != nil {
				lastTag = t[1]
			} else if strings.TrimSpace(line) != "" {
				lastTag = ""
			}
		}
	}
	if cur != nil {
		return nil, fmt.Errorf("%s:%d: code block never closed", path, cur.Line)
	}
	return blocks, nil
}

// dedent strips the fence's own indentation (a block inside a list item)
// from a line of its body.
func dedent(line string, indent int) string {
	for i := 0; i < indent && strings.HasPrefix(line, " "); i++ {
		line = line[1:]
	}
	return line
}

// ParseCommands splits the lines of an sh block into commands. first is
// the file line of lines[0]. It accepts what the docs need (pipes, one
// output redirect, quotes, here-documents) and rejects the rest, so a
// command is never checked as something it is not.
func ParseCommands(lines []string, first int) ([]Command, error) {
	var out []Command
	for i := 0; i < len(lines); i++ {
		line := strings.TrimSpace(lines[i])
		n := first + i
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		if m := heredoc.FindStringSubmatch(line); m != nil {
			var doc []string
			j := i + 1
			for ; j < len(lines) && lines[j] != m[2]; j++ {
				doc = append(doc, lines[j])
			}
			if j == len(lines) {
				return nil, fmt.Errorf("%d: here-document %s never ends", n, m[2])
			}
			out = append(out, Command{Line: n, Text: line, Pipeline: [][]string{{"cat"}}, Redirect: m[1], Stdin: strings.Join(doc, "\n") + "\n"})
			i = j
			continue
		}
		for strings.HasSuffix(line, "\\") && i+1 < len(lines) {
			i++
			line = strings.TrimSuffix(line, "\\") + " " + strings.TrimSpace(lines[i])
		}
		c, err := split(line)
		if err != nil {
			return nil, fmt.Errorf("%d: %s: %w", n, line, err)
		}
		c.Line, c.Text = n, line
		out = append(out, c)
	}
	return out, nil
}

// split tokenises one command line the way sh would for the subset the
// docs use.
func split(line string) (Command, error) {
	var (
		c        Command
		words    []string
		word     strings.Builder
		inWord   bool
		redirect bool
	)
	flush := func() {
		if !inWord {
			return
		}
		if redirect {
			c.Redirect, redirect = word.String(), false
		} else {
			words = append(words, word.String())
		}
		word.Reset()
		inWord = false
	}
	for i := 0; i < len(line); i++ {
		ch := line[i]
		switch {
		case ch == '\'':
			j := strings.IndexByte(line[i+1:], '\'')
			if j < 0 {
				return c, fmt.Errorf("unterminated single quote")
			}
			word.WriteString(line[i+1 : i+1+j])
			inWord, i = true, i+1+j
		case ch == '"':
			i++
			for ; i < len(line) && line[i] != '"'; i++ {
				if line[i] == '\\' && i+1 < len(line) && strings.IndexByte(`"\$`, line[i+1]) >= 0 {
					i++
				} else if line[i] == '$' || line[i] == '`' {
					return c, fmt.Errorf("expansion inside double quotes is not supported in docs")
				}
				word.WriteByte(line[i])
			}
			if i == len(line) {
				return c, fmt.Errorf("unterminated double quote")
			}
			inWord = true
		case ch == '\\' && i+1 < len(line):
			word.WriteByte(line[i+1])
			inWord, i = true, i+1
		case ch == ' ' || ch == '\t':
			flush()
		case ch == '|':
			flush()
			if len(words) == 0 || redirect {
				return c, fmt.Errorf("empty command in pipeline")
			}
			c.Pipeline, words = append(c.Pipeline, words), nil
		case ch == '>':
			flush()
			if c.Redirect != "" {
				return c, fmt.Errorf("more than one redirect")
			}
			redirect = true
		case strings.IndexByte(";&$`<(){}*?", ch) >= 0:
			return c, fmt.Errorf("shell syntax %q is not supported in docs; one simple command or pipeline per line", ch)
		default:
			word.WriteByte(ch)
			inWord = true
		}
	}
	flush()
	if redirect {
		return c, fmt.Errorf("redirect without a file")
	}
	if len(words) == 0 {
		return c, fmt.Errorf("empty command")
	}
	c.Pipeline = append(c.Pipeline, words)
	return c, nil
}

// Tagged returns, in file order, the sh blocks of the Markdown files in dir
// tagged `<!-- e2e: name -->`: what the e2e suite runs against its cluster.
func Tagged(dir, name string) ([]Block, error) {
	files, err := filepath.Glob(filepath.Join(dir, "*.md"))
	if err != nil {
		return nil, err
	}
	sort.Strings(files)
	var out []Block
	for _, f := range files {
		bs, err := Parse(f)
		if err != nil {
			return nil, err
		}
		for _, b := range bs {
			if b.Lang == "sh" && b.E2E() == name {
				out = append(out, b)
			}
		}
	}
	if len(out) == 0 {
		return nil, fmt.Errorf("no sh block tagged e2e: %s in %s", name, dir)
	}
	return out, nil
}
