public enum AskCLIPlaceholder {}
