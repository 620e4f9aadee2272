//! Brace expansion of shard patterns, as shells and webdataset write them:
//! `shards/{00000..00099}.tar` (a numeric range, zero-padded to the width of its bounds) and
//! `{train,val}/part-{0..3}.parquet` (a list). Braces nest and several expand as a product,
//! left to right. The glob crate does not expand braces, so they are expanded here first and
//! each result is then globbed.

/// The most names one pattern may expand to: a typo such as `{0..99999999}` must not exhaust
/// memory.
pub const MAX_EXPANSIONS: usize = 1_000_000;

/// Every name `pattern` expands to, in order; a pattern without braces is itself. An error says
/// what is wrong with the braces.
pub fn expand(pattern: &str) -> Result<Vec<String>, String> {
    let mut out = Vec::new();
    expand_into(pattern, &mut out)?;
    Ok(out)
}

fn expand_into(pattern: &str, out: &mut Vec<String>) -> Result<(), String> {
    let Some((open, close)) = first_group(pattern)? else {
        push(out, pattern.to_string())?;
        return Ok(());
    };
    let (head, body, tail) = (
        &pattern[..open],
        &pattern[open + 1..close],
        &pattern[close + 1..],
    );
    for alternative in alternatives(body)? {
        expand_into(&format!("{head}{alternative}{tail}"), out)?;
    }
    Ok(())
}

fn push(out: &mut Vec<String>, name: String) -> Result<(), String> {
    if out.len() >= MAX_EXPANSIONS {
        return Err(format!(
            "the pattern expands to more than {MAX_EXPANSIONS} names"
        ));
    }
    out.push(name);
    Ok(())
}

/// The byte offsets of the first top-level `{` and its matching `}`, if any.
fn first_group(pattern: &str) -> Result<Option<(usize, usize)>, String> {
    let Some(open) = pattern.find('{') else {
        if pattern.contains('}') {
            return Err(format!("\"{pattern}\" has a `}}` without its `{{`"));
        }
        return Ok(None);
    };
    let mut depth = 0usize;
    for (at, c) in pattern[open..].char_indices() {
        match c {
            '{' => depth += 1,
            '}' => {
                depth -= 1;
                if depth == 0 {
                    return Ok(Some((open, open + at)));
                }
            }
            _ => {}
        }
    }
    Err(format!("\"{pattern}\" has a `{{` without its `}}`"))
}

/// What one group's body stands for: `A..B` a numeric range, else its top-level
/// comma-separated parts (which may hold braces of their own).
fn alternatives(body: &str) -> Result<Vec<String>, String> {
    if let Some((from, to)) = body.split_once("..") {
        if !from.is_empty() && !to.is_empty() && !body.contains(['{', ',']) {
            return range(from, to);
        }
    }
    let mut parts = Vec::new();
    let (mut depth, mut start) = (0usize, 0);
    for (at, c) in body.char_indices() {
        match c {
            '{' => depth += 1,
            '}' => depth -= 1,
            ',' if depth == 0 => {
                parts.push(body[start..at].to_string());
                start = at + 1;
            }
            _ => {}
        }
    }
    parts.push(body[start..].to_string());
    if parts.len() < 2 {
        return Err(format!(
            "\"{{{body}}}\" is neither a range (`{{0..9}}`) nor a list (`{{a,b}}`)"
        ));
    }
    Ok(parts)
}

/// `from..to`, both decimal, ascending or descending, each number as wide as the wider bound
/// when either bound starts with a zero (`{000..120}`).
fn range(from: &str, to: &str) -> Result<Vec<String>, String> {
    let bound = |s: &str| {
        s.parse::<u64>()
            .map_err(|_| format!("\"{{{from}..{to}}}\": \"{s}\" is not a whole number"))
    };
    let (a, b) = (bound(from)?, bound(to)?);
    let padded = (from.len() > 1 && from.starts_with('0')) || (to.len() > 1 && to.starts_with('0'));
    let width = if padded { from.len().max(to.len()) } else { 0 };
    let count = a.abs_diff(b) + 1;
    if count > MAX_EXPANSIONS as u64 {
        return Err(format!(
            "\"{{{from}..{to}}}\" stands for {count} names, more than {MAX_EXPANSIONS}"
        ));
    }
    let numbers: Box<dyn Iterator<Item = u64>> = if a <= b {
        Box::new(a..=b)
    } else {
        Box::new((b..=a).rev())
    };
    Ok(numbers.map(|n| format!("{n:0width$}")).collect())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ranges_are_zero_padded_to_their_bounds() {
        assert_eq!(
            expand("s/{00008..00011}.tar").unwrap(),
            ["s/00008.tar", "s/00009.tar", "s/00010.tar", "s/00011.tar"]
        );
        assert_eq!(expand("{9..11}").unwrap(), ["9", "10", "11"]);
        assert_eq!(expand("{3..1}").unwrap(), ["3", "2", "1"]);
    }

    #[test]
    fn lists_nest_and_groups_multiply_left_to_right() {
        assert_eq!(
            expand("{train,val}-{0..1}.tar").unwrap(),
            ["train-0.tar", "train-1.tar", "val-0.tar", "val-1.tar"]
        );
        assert_eq!(expand("a{b,c{1..2}}").unwrap(), ["ab", "ac1", "ac2"]);
        assert_eq!(expand("plain.tar").unwrap(), ["plain.tar"]);
    }

    #[test]
    fn malformed_braces_are_errors() {
        for bad in ["a{0..3", "a}b", "{x}", "{a..3}", "{0..99999999}"] {
            assert!(expand(bad).is_err(), "{bad}");
        }
    }
}
