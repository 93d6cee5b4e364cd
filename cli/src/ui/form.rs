//! Query strings and form bodies as ordered pairs (a bulk action repeats `id`), with the
//! console's only input checks: parse-level ones, each naming its field.
use super::app::UiError;

pub struct Form(Vec<(String, String)>);

impl Form {
    pub fn parse(raw: &[u8]) -> Form {
        Form(
            form_urlencoded::parse(raw)
                .map(|(k, v)| (k.into_owned(), v.into_owned()))
                .collect(),
        )
    }

    pub fn query(raw: Option<&str>) -> Form {
        Form::parse(raw.unwrap_or_default().as_bytes())
    }

    pub fn get(&self, name: &str) -> Option<&str> {
        self.0
            .iter()
            .find(|(k, _)| k == name)
            .map(|(_, v)| v.as_str())
    }

    /// The field trimmed, `None` when absent or blank (a blank filter is no filter).
    pub fn text(&self, name: &str) -> Option<String> {
        self.get(name)
            .map(str::trim)
            .filter(|v| !v.is_empty())
            .map(String::from)
    }

    pub fn all(&self, name: &str) -> impl Iterator<Item = &str> {
        self.0
            .iter()
            .filter(move |(k, _)| k == name)
            .map(|(_, v)| v.as_str())
    }

    pub fn pairs(&self) -> &[(String, String)] {
        &self.0
    }

    pub fn confirmed(&self) -> bool {
        self.get("confirm") == Some("yes")
    }

    pub fn int(&self, name: &str) -> Result<Option<i32>, UiError> {
        self.text(name)
            .map(|v| {
                v.parse()
                    .map_err(|_| UiError::input(name, format!("{v:?} is not an integer")))
            })
            .transpose()
    }

    pub fn bigint(&self, name: &str) -> Result<Option<i64>, UiError> {
        self.text(name).map(|v| parse_id(name, &v)).transpose()
    }

    /// A JSON document, checked here so the message names the field; the text itself goes to
    /// the database unchanged (every digit kept).
    pub fn json(&self, name: &str) -> Result<Option<String>, UiError> {
        self.text(name)
            .map(
                |v| match serde_json::from_str::<&serde_json::value::RawValue>(&v) {
                    Ok(_) => Ok(v),
                    Err(e) => Err(UiError::input(name, format!("not valid JSON: {e}"))),
                },
            )
            .transpose()
    }
}

pub fn parse_id(name: &str, text: &str) -> Result<i64, UiError> {
    text.trim()
        .parse()
        .map_err(|_| UiError::input(name, format!("{text:?} is not an integer")))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn repeated_fields_and_checks_name_the_field() {
        let form = Form::parse(b"id=1&id=2&payload=%7B%22a%22%3A1%7D&n=x&empty=+");
        assert_eq!(form.all("id").collect::<Vec<_>>(), ["1", "2"]);
        assert_eq!(form.json("payload").unwrap().as_deref(), Some("{\"a\":1}"));
        assert_eq!(form.text("empty"), None);
        let err = form.int("n").unwrap_err().message();
        assert_eq!(err, "n: \"x\" is not an integer");
        let bad = Form::parse(b"payload=%7Bnope").json("payload").unwrap_err();
        assert!(
            bad.message().starts_with("payload: not valid JSON"),
            "{}",
            bad.message()
        );
    }
}
