//! A launch template as the config names it: by id (`lt-…`, as EC2 writes ids) or by name.
//! Decided once here; every call that takes a template asks which of the two it is.

use serde::{Deserialize, Deserializer};

#[derive(Debug, Clone, PartialEq, Eq)]
pub enum TemplateRef {
    Id(String),
    Name(String),
}

impl TemplateRef {
    pub fn parse(text: &str) -> TemplateRef {
        match text.starts_with("lt-") {
            true => TemplateRef::Id(text.to_string()),
            false => TemplateRef::Name(text.to_string()),
        }
    }

    /// As the config wrote it.
    pub fn as_str(&self) -> &str {
        match self {
            TemplateRef::Id(s) | TemplateRef::Name(s) => s,
        }
    }
}

impl std::fmt::Display for TemplateRef {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

impl<'de> Deserialize<'de> for TemplateRef {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        use serde::de::Error;
        let text = String::deserialize(d)?;
        if text.is_empty() {
            return Err(D::Error::custom(
                "workers.launch_template: a template's name or its id (lt-…)",
            ));
        }
        Ok(TemplateRef::parse(&text))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_id_is_told_from_a_name_once() {
        assert_eq!(
            TemplateRef::parse("lt-0abc"),
            TemplateRef::Id("lt-0abc".into())
        );
        let name = TemplateRef::parse("demo-worker");
        assert_eq!(name, TemplateRef::Name("demo-worker".into()));
        assert_eq!(name.to_string(), "demo-worker");
    }
}
