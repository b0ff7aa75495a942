package envelope

// MaxDepth is the deepest nesting of objects and arrays a document may
// have, the envelope itself being the first level. The gateway parses the
// file with serde_json, whose default recursion limit refuses a 128th
// level; an envelope it cannot read must not reach it. Refusing early also
// bounds what canonicalisation has to do with hostile input.
const MaxDepth = 127

// checkDepth refuses a document nested deeper than MaxDepth. It runs
// before decoding, on the raw bytes, in one pass that jumps over strings.
func checkDepth(data []byte) *Rejection {
	depth := 0
	for i := 0; i < len(data); i++ {
		switch data[i] {
		case '"':
			i = endOfString(data, i)
		case '{', '[':
			depth++
			if depth > MaxDepth {
				return reject(ReasonMalformedStructure, "nested deeper than %d levels at byte %d", MaxDepth, i)
			}
		case '}', ']':
			depth--
		}
	}
	return nil
}
